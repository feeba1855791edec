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
import functools
import inspect
import subprocess
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Type

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
    LimitUnavailableError,
    NotFoundError,
    SandboxUnavailableError,
    SpawnError,
    StdinClosedError,
    TerminalClosedError,
)
from ._helpers import resolve_future
from ._native import (
    CancelToken,
    Collect,
    CollectedOutput,
    OffsetRead,
    Process,
    ProcessRead,
    RunResult,
    SandboxInfo,
    SandboxPolicy,
    Spawned,
    Spec,
    Foreground,
    Terminal,
    Unsubscribe,
    limits_support,
    metadata_unavailable,
)

__version__: str = _native.__version__

#: ``resolve(..., stdin=PIPE)`` gives the command a stdin pipe that stays
#: open for ``Process.write_stdin`` until ``Process.close_stdin``. The same
#: value as ``subprocess.PIPE``, which works too.
PIPE: int = subprocess.PIPE

#: ``Executor.spawn(..., stdin=DEVNULL)``: ``/dev/null`` (the default). The
#: same value as ``subprocess.DEVNULL``.
DEVNULL: int = subprocess.DEVNULL

#: ``Executor.spawn(..., stdout=INHERIT)``: the host's own descriptor,
#: shared with the program (``subprocess`` says None for it; here None is
#: the default, a collected stream).
INHERIT: int = _native.INHERIT

__all__ = [
    "AlreadyCancelledError",
    "BlockingCallError",
    "ForkedChildError",
    "StillRunningError",
    "CancelToken",
    "Collect",
    "CollectedOutput",
    "DEVNULL",
    "DisposedError",
    "DshError",
    "Executor",
    "Foreground",
    "INHERIT",
    "InternalError",
    "InvalidArgumentError",
    "LimitUnavailableError",
    "NotFoundError",
    "OffsetRead",
    "PIPE",
    "Process",
    "ProcessRead",
    "RunResult",
    "SandboxInfo",
    "SandboxPolicy",
    "SandboxUnavailableError",
    "Spawned",
    "Spec",
    "SpawnError",
    "StdinClosedError",
    "Terminal",
    "TerminalClosedError",
    "Unsubscribe",
    "__version__",
    "limits_support",
    "metadata_unavailable",
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


def _native_keywords() -> "list[inspect.Parameter]":
    """The constructor's keywords, as the native module declares them."""
    try:
        return list(inspect.signature(_native.Executor).parameters.values())
    except ValueError:
        # CPython 3.9: a class of an abi3 module has no text signature before
        # 3.10. Its reconfigure() takes the same keywords (one list in Rust).
        return list(inspect.signature(_native.Executor.reconfigure).parameters.values())[1:]


if TYPE_CHECKING:
    # For a type checker an Executor has the native executor's methods, as
    # declared in _native.pyi; at run time they are delegated (see below).
    _ExecutorBase = _native.Executor
else:
    _ExecutorBase = object


class Executor(_ExecutorBase):
    """A bash executor: resolves, runs and starts commands.

    Every keyword is optional; None (or leaving it out) means the default
    (docs/configuration.md). Numbers are positive whole numbers:

    - ``cwd``: default workdir and base of a relative one, a ``str`` or
      ``os.PathLike`` (default: the process cwd, read at each ``resolve``).
    - ``timeout_ms``: foreground timeout in milliseconds (default 120000,
      or ``max_timeout_ms`` if smaller).
    - ``max_timeout_ms``: cap a request's timeout is clamped to, in
      milliseconds (default 600000).
    - ``max_output_bytes``: in-memory window of each stream in bytes
      (default 64000); a foreground request's ``stdout_max_bytes`` may
      raise stdout's.
    - ``max_spill_bytes``: largest spill file of one stream in bytes
      (default 67108864, 64 MiB).
    - ``grace_ms``: wait between SIGTERM and SIGKILL, and how long output is
      collected after the shell exits, in milliseconds (default 3000, at most
      2147483647).
    - ``spill_dir``: where the private spill directory is made (default: the
      temp dir); created (0700) if missing.
    - ``retain_settled``: settled background processes kept registered
      (default 1000); the oldest beyond it are forgotten.
    - ``sandbox_mode``: ``'read-only'``, ``'workspace-write'`` or
      ``'danger-full-access'``, the policy of a request without one
      (default None: not confined).
    - ``limits``: a dict of ``memory_bytes``, ``processes``,
      ``cpu_seconds``, ``file_size_bytes``, ``open_files``: the limits every
      command gets, and the most a request may ask for (docs/limits.md).

    A bad value raises InvalidArgumentError (a ValueError) whose ``field``
    names it (``'config.grace_ms'``); an unknown keyword is a TypeError.
    Use it as a context manager: leaving the block calls :meth:`close`.
    Executors still open at interpreter exit are closed then.
    """

    # The native executor this one wraps (not a base class, so that help()
    # shows one Executor); __weakref__ for the set closed at exit.
    __slots__ = ("_executor", "__weakref__")

    _executor: _native.Executor

    if not TYPE_CHECKING:  # a type checker takes the keywords from _native.pyi

        def __new__(cls, **config):
            """Makes the executor from the keywords above (validated by the
            native constructor); registers it to be closed at interpreter exit."""
            self = super().__new__(cls)
            self._executor = _native.Executor(**config)
            _open_executors.add(self)
            return self

        # help() and inspect show the native keywords, not **config.
        __new__.__signature__ = inspect.Signature(
            [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *_native_keywords()]
        )

    def __enter__(self) -> Executor:
        """Returns the executor itself."""
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        """Calls :meth:`close`: kills everything still running and waits."""
        self.close()

    async def run_async(self, spec: Spec, cancel: Optional[CancelToken] = None) -> RunResult:
        """Runs ``spec`` without blocking the event loop; returns its RunResult.

        ``cancel``: a CancelToken whose ``cancel()`` aborts the run; the
        result then says ``aborted=True``. Cancelling the awaiting task
        instead aborts the command (SIGTERM, then SIGKILL after
        ``grace_ms``), waits until it is gone, and re-raises
        ``asyncio.CancelledError``.
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


def _delegate(member: Any) -> Any:
    """``member`` of the native executor as a member of Executor, applied to
    the wrapped native executor; with the native docstring and signature."""
    if not callable(member):  # a native property (a getset descriptor)
        return property(lambda self: member.__get__(self._executor), doc=member.__doc__)

    @functools.wraps(member)
    def method(self: Executor, *args: Any, **kwargs: Any) -> Any:
        return member(self._executor, *args, **kwargs)

    return method


# Every method and property of the native executor, and its repr; a new
# native method appears here without a line of Python.
for _name, _member in vars(_native.Executor).items():
    if (_name == "__repr__" or not _name.startswith("__")) and _name not in vars(Executor):
        setattr(Executor, _name, _delegate(_member))
del _name, _member, _ExecutorBase
