"""Small pieces the native module calls back into."""

from __future__ import annotations

import asyncio
from typing import Any, Optional


def resolve_future(future: "asyncio.Future[Any]", result: Any, error: Optional[BaseException]) -> None:
    """Settles ``future`` unless it was cancelled meanwhile (runs on its loop)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
