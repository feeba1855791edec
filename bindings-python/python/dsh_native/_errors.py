"""Exceptions raised by dsh_native. Each also subclasses the builtin a Python
user would reach for: ValueError for bad input, OSError (with errno) for a
command that could not be started, KeyError for an unknown process id."""

from __future__ import annotations

from typing import Optional


class DshError(Exception):
    """Base class of every dsh_native error."""


class InvalidArgumentError(DshError, ValueError):
    """A config, request or spec field was refused; ``field`` names it
    (e.g. ``"request.timeout_ms"``). Nothing was run."""

    field: Optional[str] = None


class SpawnError(DshError, OSError):
    """The command could not be started; ``errno`` is set (ENOENT for a
    missing workdir or a missing bash)."""


class NotFoundError(DshError, KeyError):
    """No background process has this id."""

    id: Optional[str] = None

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DisposedError(DshError, RuntimeError):
    """The executor was closed; nothing was run."""


class AlreadyCancelledError(DshError, RuntimeError):
    """The cancel token had already fired; nothing was run."""


class SandboxUnavailableError(DshError, RuntimeError):
    """A confined sandbox mode was requested and cannot be enforced here;
    nothing was run (fail closed)."""


class LimitUnavailableError(DshError, RuntimeError):
    """A limit was asked for (by the request or the executor's ``limits``)
    that this host cannot enforce; nothing was run. ``limit`` names it
    (``'memory'``, ``'processes'``, ...)."""

    limit: str


class BlockingCallError(DshError, RuntimeError):
    """A blocking call was made where it could deadlock: from a callback
    (``on_task_done``, a completion callback) or another running wait."""


class StillRunningError(DshError, RuntimeError):
    """``forget`` was asked for a background process that is still running;
    ``id`` names it."""

    id: Optional[str] = None


class ForkedChildError(DshError, RuntimeError):
    """The executor or process was created before this process was forked;
    its commands are supervised by the parent. Create a new Executor in the
    child."""


class StdinClosedError(DshError, BrokenPipeError):
    """A write to a process's stdin that cannot be taken (``errno`` is
    EPIPE). ``reason`` says why: ``'not-piped'`` (started without
    ``stdin=PIPE``), ``'closed'`` (after ``close_stdin()``), ``'exited'``
    (the command has exited) or ``'broken'`` (the command closed its
    stdin); ``id`` names the process."""

    id: Optional[str] = None
    reason: Optional[str] = None

class TerminalClosedError(DshError, RuntimeError):
    """A terminal session cannot take this call any more: its program has
    exited (``write``, ``signal_foreground``, ``resize``) or the session
    has ended."""


class InternalError(DshError, RuntimeError):
    """A bug in dsh_native."""
