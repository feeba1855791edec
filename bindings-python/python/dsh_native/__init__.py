"""dsh_native: a native bash executor for AI-agent harnesses.

>>> from dsh_native import Executor
>>> with Executor(timeout_ms=10_000) as ex:
...     result = ex.run(ex.resolve("echo hello; exit 3"))
>>> (result.exit_code, result.stdout.text)
(3, 'hello\\n')
"""

from __future__ import annotations

import asyncio
import atexit
import weakref
from types import TracebackType
from typing import Optional, Type

from . import _native
from ._errors import (
    AlreadyCancelledError,
    BlockingCallError,
    ForkedChildError,
    StillRunningError,
    DisposedError,
    DshError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    SandboxUnavailableError,
    SpawnError,
)
from ._helpers import resolve_future
from ._native import (
    CancelToken,
    CollectedOutput,
    Process,
    ProcessRead,
    RunResult,
    SandboxInfo,
    SandboxPolicy,
    Spec,
    Unsubscribe,
)

__version__: str = _native.__version__

__all__ = [
    "AlreadyCancelledError",
    "BlockingCallError",
    "ForkedChildError",
    "StillRunningError",
    "CancelToken",
    "CollectedOutput",
    "DisposedError",
    "DshError",
    "Executor",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "Process",
    "ProcessRead",
    "RunResult",
    "SandboxInfo",
    "SandboxPolicy",
    "SandboxUnavailableError",
    "Spec",
    "SpawnError",
    "Unsubscribe",
    "__version__",
]

# Executors still open at interpreter exit are closed, so no command they
# started outlives the program.
_open_executors: "weakref.WeakSet[Executor]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for executor in list(_open_executors):
        try:
            executor.close()
        except DshError:
            pass


class Executor(_native.Executor):
    """A bash executor. Keywords are the configuration names of the README: ``cwd``,
    ``timeout_ms``, ``max_timeout_ms``, ``max_output_bytes``,
    ``max_spill_bytes``, ``grace_ms``, ``spill_dir``, ``sandbox_mode``.
    Use it as a context manager: leaving the block calls :meth:`close`."""

    def __init__(self, **config: object) -> None:
        # The native __new__ has already validated and applied ``config``.
        _open_executors.add(self)

    def __enter__(self) -> "Executor":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    async def run_async(self, spec: Spec, cancel: Optional[CancelToken] = None) -> RunResult:
        """Runs ``spec`` without blocking the event loop.

        Cancelling the awaiting task aborts the command (SIGTERM, then
        SIGKILL after ``grace_ms``), waits until it is gone, and re-raises
        ``asyncio.CancelledError``. To get the aborted result instead, pass
        a ``CancelToken`` and call its ``cancel()``.
        """
        loop = asyncio.get_running_loop()
        done: "asyncio.Future[RunResult]" = loop.create_future()
        token = cancel if cancel is not None else CancelToken()

        def settle(result: Optional[RunResult], error: Optional[BaseException]) -> None:
            try:
                loop.call_soon_threadsafe(resolve_future, done, result, error)
            except RuntimeError:  # the loop is closed: nobody is waiting
                pass

        self._run_with_callback(spec, token, settle)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            token.cancel()
            try:
                await done
            except Exception:
                pass
            raise
