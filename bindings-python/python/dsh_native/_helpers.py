"""Small pieces the native module calls back into."""

from __future__ import annotations

import asyncio
from typing import Any, Optional


def resolve_or_keep(future: "asyncio.Future[Any]", result: Any, keep: Any) -> None:
    """Settles ``future`` with ``result``, or, when it was cancelled meanwhile,
    hands ``result`` to ``keep``: output taken for a read that was given up
    belongs to the next read (runs on its loop)."""
    if future.done():
        keep(result)
    else:
        future.set_result(result)


def resolve_future(future: "asyncio.Future[Any]", result: Any, error: Optional[BaseException]) -> None:
    """Settles ``future`` unless it was cancelled meanwhile (runs on its loop)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
