"""Background processes as the client mirrors them (``Process``): the last
snapshot the server sent, consuming reads and reads by offset."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, Literal, Optional, TYPE_CHECKING, Union

from ._checks import _fresh, _stdin_pieces, _timeout_arg
from ._results import _NOTHING_READ, _opt_int, _opt_str, _sandbox_info
from ._transport import _all_answered, _FactWaiters, _wait_event

if TYPE_CHECKING:
    from ._results import ProcessRead, SandboxInfo
    from ._session import _Remote


class _ProcState:
    """What this client knows of one background process, shared by every
    handle to it: its last snapshot, whether it has settled, who waits for
    that, and (once the executor is closed) its output not yet read."""

    __slots__ = (
        "lock", "snapshot", "settled", "failure", "wait_sent", "settle_waiters", "final_read", "announced",
        "__weakref__",
    )  # fmt: skip

    def __init__(self, snapshot: Dict[str, Any]) -> None:
        self.lock = threading.Lock()
        self.snapshot = snapshot
        self.settled = threading.Event()
        self.failure: Optional[BaseException] = None
        self.wait_sent = False
        self.settle_waiters = _FactWaiters(self.lock)
        self.final_read: Optional[ProcessRead] = None
        # Handed to the task-done listeners (from its task_done, or from a
        # refresh after a reconnection that found it settled): once only.
        self.announced = False
        if snapshot["settled"]:
            self.settled.set()

    @property
    def id(self) -> str:
        return str(self.snapshot["id"])

    def update(self, snapshot: Dict[str, Any]) -> None:
        with self.lock:
            if self.snapshot["settled"] and not snapshot["settled"]:
                return  # never back from settled (an older answer arriving late)
            self.snapshot = snapshot
            if not snapshot["settled"]:
                return
            waiters = self.settle_waiters.take()
        self.settled.set()
        _FactWaiters.tell(waiters, None)

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.snapshot["settled"] or self.failure is not None:
                return
            self.failure = error
            waiters = self.settle_waiters.take()
        self.settled.set()
        _FactWaiters.tell(waiters, error)

    def take_final_read(self) -> ProcessRead:
        with self.lock:
            read, self.final_read = self.final_read, None
        return read if read is not None else _NOTHING_READ

    def announce(self) -> bool:
        """True the first time: the listeners are to hear of it now."""
        with self.lock:
            first, self.announced = not self.announced, True
        return first


class _ReadCursor:
    """Where this client's next read of one process's output starts in
    each stream (whole-stream byte offsets), when it reads by offset: a
    read whose answer a dropped connection lost is asked again from the
    same place, so nothing is lost or read twice. Kept by id for as long as
    the server keeps the process, whoever holds a handle to it."""

    __slots__ = ("lock", "stdout", "stderr")

    def __init__(self, stdout: int, stderr: int) -> None:
        # The two offsets move together, and only from where a read began.
        self.lock = threading.Lock()
        self.stdout = stdout
        self.stderr = stderr


class Process:
    """A background process on the far side, from ``start``, ``get``,
    ``list`` or a task-done listener. Every handle to one process shares
    its status and its read cursor. A fact that can change (``status``,
    ``done``, ``exit_code``, …) is asked of the server while the process
    runs, so it is as live as the local one; once settled it is final and
    answered here."""

    __slots__ = ("_remote", "_state")

    def __init__(self, remote: "_Remote", state: _ProcState) -> None:
        self._remote = remote
        self._state = state

    def _now(self) -> Dict[str, Any]:
        return self._remote.current(self._state)

    @property
    def id(self) -> str:
        return self._state.id

    @property
    def command(self) -> str:
        return str(self._state.snapshot["command"])

    @property
    def owner(self) -> Optional[str]:
        owner = self._state.snapshot.get("owner")
        return None if owner is None else str(owner)

    @property
    def status(self) -> Literal["running", "completed", "killed"]:
        """Live: ``'killed'`` as soon as a stop was requested."""
        s = self._now()["status"]
        return "completed" if s == "completed" else "killed" if s == "killed" else "running"

    @property
    def exit_code(self) -> Optional[int]:
        return _opt_int(self._now().get("exit_code"))

    @property
    def signal(self) -> Optional[str]:
        return _opt_str(self._now().get("signal"))

    @property
    def exit_status_unavailable(self) -> bool:
        return bool(self._now().get("exit_status_unavailable", False))

    @property
    def survivors(self) -> int:
        return int(self._now().get("survivors", 0))

    @property
    def sandbox(self) -> Optional[SandboxInfo]:
        return _sandbox_info(self._now().get("sandbox"))

    @property
    def limit(self) -> Optional[Literal["memory", "processes", "cpu", "file_size"]]:
        limit = self._now().get("limit")
        return limit if limit in ("memory", "processes", "cpu", "file_size") else None

    @property
    def limits_enforcement(self) -> Dict[str, str]:
        return dict(self._now().get("limits_enforcement") or {})

    @property
    def done(self) -> bool:
        return bool(self._now()["settled"])

    @property
    def has_stdin_pipe(self) -> bool:
        return bool(self._state.snapshot.get("has_stdin_pipe", False))

    def read_output(self) -> ProcessRead:
        """Consuming read, as locally; after the executor is closed, what
        was left unread when it closed (fetched then), once."""
        return self._remote.read_output_of(self._state)

    def kill(self) -> bool:
        """Begins termination; True when it was running and this call began it."""
        return self._remote.kill_of(self._state)

    def write_stdin(self, data: Union[str, bytes]) -> None:
        """Writes all of ``data`` to the command's stdin; returns once the
        far side's bounded buffer took every byte (back-pressure: a command
        that does not read holds the writer). Ctrl-C stops the wait, but
        what was sent is written when the command reads."""
        pieces = _stdin_pieces(data)
        self._remote.refuse_blocking()
        replies = [self._remote.stdin_write(self._state, piece) for piece in pieces]
        for reply in replies:
            reply.get()

    def write_stdin_async(self, data: Union[str, bytes]) -> "asyncio.Future[None]":
        """An asyncio future that completes once every byte of ``data`` was
        taken (back-pressure), in call order with other writes."""
        pieces = _stdin_pieces(data)
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        one = _all_answered(loop, future, len(pieces))

        try:
            for piece in pieces:
                self._remote.stdin_write(self._state, piece, one)
        except BaseException as e:
            future.set_exception(e)
        return future

    def close_stdin(self) -> bool:
        """Closes the command's stdin once what was written is delivered.
        True when this call closed it."""
        return self._remote.close_stdin_of(self._state)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the process settles; TimeoutError after ``timeout``
        seconds (None: no limit). Ctrl-C interrupts the wait, not the process."""
        t = _timeout_arg(timeout)
        self._remote.refuse_blocking()
        st = self._state
        if not st.settled.is_set():
            self._remote.watch(st)
            if not _wait_event(st.settled, t):
                raise TimeoutError(f"{st.id} is still running")
        if not st.snapshot["settled"] and st.failure is not None:
            raise _fresh(st.failure)

    def wait_async(self) -> "asyncio.Future[None]":
        """An asyncio future that completes when the process settles.
        Cancelling it (``asyncio.wait_for`` timing out) leaves nothing behind:
        one wait per process is in flight, however many futures poll."""
        st = self._state
        future, watch = st.settle_waiters.future(lambda: bool(st.snapshot["settled"]), lambda: st.failure)
        if watch:
            try:
                self._remote.watch(st)
            except BaseException as e:
                st.fail(e)
        return future

    def __repr__(self) -> str:
        # From what is known here: a repr never waits on the network.
        s = self._state.snapshot
        return f"Process(id={s['id']!r}, status={s['status']!r}, exit_code={s.get('exit_code')!r}, signal={s.get('signal')!r})"


class Unsubscribe:
    """Returned by ``Executor.on_task_done``: calling it removes the listener."""

    __slots__ = ("_remote", "_id")

    def __init__(self, remote: "_Remote", id: int) -> None:
        self._remote = remote
        self._id = id

    def __call__(self) -> bool:
        """True if the listener was registered; False on later calls."""
        with self._remote.lock:
            return self._remote.listeners.pop(self._id, None) is not None
