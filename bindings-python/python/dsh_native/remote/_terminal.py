"""Terminal sessions (``Terminal``): output read by long-poll, one read at a
time, so the server's bound on unread output holds across the connection and
what a reader that gave up was sent goes to the next one."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Dict, List, Literal, Optional, Tuple, TYPE_CHECKING, Union

from .._errors import InvalidArgumentError, TerminalClosedError
from .._helpers import wake_all
from ._checks import (
    _dimension,
    _dimension_number,
    _fresh,
    _invalid,
    ProtocolError,
    _required_str,
    _SIGNAL_POLL,
    _terminal_pieces,
    _timeout_arg,
)
from ._results import _bool, _int, _obj, _opt_int, _opt_str, _py_bool, _Shape, _str
from ._transport import _all_answered, _deliver, _FactWaiters, _wait_event

if TYPE_CHECKING:
    from ._checks import _Number
    from ._session import _Remote


# A long-poll that waits until there is output, however long: a value past
# what any clock counts, which the server reads as no limit.
_FOREVER_MS = 1e300

# A timeout longer than this (about 31 years) is waited as none, and not
# sent: the server's clock overflows on some longer ones (past ~9.2e18 s).
_FOREVER_S = 1e9

_TERMINAL_SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP")

# The core's words when a session cannot take a call, for a session whose
# end was learnt at ``close``: nobody is left on the far side to say them.
_INPUT_GONE = "the terminal's program has exited: its input cannot be written"
_RESIZE_GONE = "the terminal's program has exited: it cannot be resized"
_NO_FOREGROUND = "the terminal has no foreground process group (its program has exited)"

# How long ``close`` goes on reading what disposed sessions printed last
# (their output ends as soon as the kernel reports the hangup: at once).
_KEEP_OUTPUT_S = 10.0


@dataclass(frozen=True, eq=False)
class Foreground:
    """A terminal's foreground process group, and whether the kernel of the
    far host shows it blocked reading the terminal (docs/terminals.md)."""

    process_group_id: int
    input_waiting: bool

    def __repr__(self) -> str:
        waiting = _py_bool(self.input_waiting)
        return f"Foreground(process_group_id={self.process_group_id}, input_waiting={waiting})"


def _term_snapshot(v: Any) -> Dict[str, Any]:
    """A terminal as the server sent it, its facts checked once here."""
    o = _obj(v)
    _str(o["id"])
    _int(o["pid"])
    _bool(o["exited"])
    _opt_int(o.get("exit_code"))
    _opt_str(o.get("signal"))
    _bool(o.get("exit_status_unavailable", False))
    _int(o.get("survivors", 0))
    _bool(o.get("output_ended", False))
    return o


def _request_field(e: InvalidArgumentError) -> InvalidArgumentError:
    """The server names a terminal request's fields ``terminal.*`` where its
    own parser refuses them; the local face (and the core) say
    ``request.*``: the same refusal, named as the local face names it."""
    field = e.field
    if not (isinstance(field, str) and field.startswith("terminal.")):
        return e
    local = "request." + field[len("terminal.") :]
    message = str(e)
    if message.startswith(field):
        message = local + message[len(field) :]
    renamed = InvalidArgumentError(message)
    renamed.field = local
    return renamed


_Waiter = Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class _TermState:
    """What this client knows of one terminal session: its last snapshot,
    and the output taken from the server but not yet by a reader.

    Every ``terminal_read`` of a session goes through here, one at a time:
    the server answers a long-poll when output arrives, so two reads in
    flight could have their answers cross and the text arrive out of
    order. A read's text goes to ``unread``, whoever asked, and readers
    take it from there themselves (an async reader once it runs again
    after its wake-up): a reader that gave up (a timeout, Ctrl-C, a
    cancelled ``__anext__``) has taken nothing, so nothing is lost; and
    nothing is asked of the server while nobody reads, so its back-pressure
    holds."""

    __slots__ = (
        "id", "lock", "changed", "snapshot", "exited", "unread", "ended", "reading", "reads_sent",
        "reads_done", "failure", "lost", "final", "output_waiters", "exit_waiters", "watch_sent",
        "write_lock", "__weakref__",
    )  # fmt: skip

    def __init__(self, id: str) -> None:
        self.id = id
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.snapshot: Dict[str, Any] = {"id": id, "pid": 0, "exited": False}
        # Set once the program exited (or the connection failed): wakes waiters.
        self.exited = threading.Event()
        self.unread: List[str] = []
        # The server said the output ended and every byte was read.
        self.ended = False
        self.reading = False
        self.reads_sent = 0
        self.reads_done = 0
        self.failure: Optional[BaseException] = None
        # A read's answer went with a dropped connection (AnswerLost): the
        # next reader is told, once, and the session goes on.
        self.lost: Optional[BaseException] = None
        # Closed: the facts and the output were kept at the close; nothing
        # more is asked of the server.
        self.final = False
        # Async readers waiting for a wake-up: output, its end, or a failure.
        self.output_waiters: List[_Waiter] = []
        self.exit_waiters = _FactWaiters(self.lock)
        self.watch_sent = False
        # Held while one write sends its pieces: a write reaches the terminal
        # whole, as a local one does, whatever other threads write.
        self.write_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return int(self.snapshot["pid"])

    @property
    def over(self) -> bool:
        """No more output will come: read to the end, or kept at the close."""
        return self.ended or self.final

    def update(self, snapshot: Dict[str, Any]) -> None:
        with self.lock:
            if self.snapshot["exited"] and not snapshot["exited"]:
                return  # never back from exited (an older answer arriving late)
            self.snapshot = snapshot
            if not snapshot["exited"]:
                return
            waiters = self.exit_waiters.take()
        self.exited.set()
        _FactWaiters.tell(waiters, None)

    def fail(self, error: BaseException) -> None:
        """The connection is gone: every waiter gets ``error``, once what
        was already taken has been read."""
        with self.lock:
            if self.final or self.failure is not None:
                return
            self.failure = error
            readers = self.serve()
            waiters = self.exit_waiters.take()
            self.changed.notify_all()
        self.exited.set()
        self.hand(readers)
        _FactWaiters.tell(waiters, error)

    def take(self) -> str:
        """What was taken from the server and not read yet (lock held)."""
        text = "".join(self.unread)
        self.unread.clear()
        return text

    def taken_or_failure(self) -> str:
        with self.lock:
            text = self.take()
            if not text and not self.over:
                if self.lost is not None:
                    lost, self.lost = self.lost, None
                    raise lost
                if self.failure is not None:
                    raise _fresh(self.failure)
        return text

    def serve(self) -> List[_Waiter]:
        """The async readers to wake (lock held): all of them, once there
        is something for them (text, the end, a lost read or the failure);
        they take it themselves when they run. Woken by :meth:`hand`,
        outside the lock."""
        if self.unread or self.over or self.lost is not None or self.failure is not None:
            waiters, self.output_waiters = self.output_waiters, []
            return waiters
        return []

    def hand(self, waiters: List[_Waiter]) -> None:
        wake_all(waiters)

    def begin_read(self) -> int:
        """Marks a read in flight (lock held); its number."""
        self.reads_sent += 1
        self.reading = True
        return self.reads_sent

    def read_over(self, n: int) -> None:
        """Read ``n`` was answered, or not sent after all (lock held). Each
        counts once however often it is told, and only the latest read
        clears ``reading`` (an older one told late leaves a newer in flight)."""
        self.reads_done = max(self.reads_done, n)
        if n == self.reads_sent:
            self.reading = False

    def read_not_sent(self, n: int) -> None:
        """Read ``n``, marked with ``begin_read``, was not sent after all
        (Ctrl-C on its way): as if answered with nothing, so the next
        reader asks."""
        with self.lock:
            self.read_over(n)
            self.changed.notify_all()

    def wait_reads(self, upto: int) -> None:
        """Until the reads numbered up to ``upto`` were answered (lock
        held). Bounded: a read answers at once or when output comes, and
        a lost connection answers every read with its failure."""
        while self.reads_done < upto:
            self.changed.wait(_SIGNAL_POLL)


class Terminal:
    """A terminal session on the far side (``Executor.spawn_terminal``): a
    program leading a new session whose controlling terminal is a
    pseudo-terminal there, with the local ``Terminal``'s members.

    Output: ``read_output()`` (what is there), ``read(timeout)`` (waits for
    some), or ``async for chunk in terminal``; all take from one cursor,
    never the same text twice, never split inside a UTF-8 character. The
    server holds the unread output (bounded by ``max_output_bytes``, beyond
    which the program waits for a reader) and sends it only when a reader
    asks. A fact that can change (``exited``, ``survivors``, …) is asked of
    the server until it is final. After the executor is closed, the handle
    answers from what the close kept: the final facts and the last output."""

    __slots__ = ("_remote", "_state")

    def __init__(self, remote: "_Remote", state: _TermState) -> None:
        self._remote = remote
        self._state = state

    # -- facts

    @property
    def pid(self) -> int:
        """The program's pid on the far host: the session's leader, and its group id."""
        return self._state.pid

    @property
    def exited(self) -> bool:
        """True once the program has exited."""
        return bool(self._remote.term_now(self._state, live=False)["exited"])

    @property
    def exit_code(self) -> Optional[int]:
        """The program's exit code; None while it runs or when a signal ended it."""
        return _opt_int(self._remote.term_now(self._state, live=False).get("exit_code"))

    @property
    def signal(self) -> Optional[str]:
        """The signal that ended the program (``'SIGHUP'``), if one did."""
        return _opt_str(self._remote.term_now(self._state, live=False).get("signal"))

    @property
    def exit_status_unavailable(self) -> bool:
        """True when the program ended but nobody could say how."""
        return bool(self._remote.term_now(self._state, live=False).get("exit_status_unavailable", False))

    @property
    def survivors(self) -> int:
        """After ``terminate()`` or close: members of the session still
        alive when the stop finished (expected: 0)."""
        return int(self._remote.term_now(self._state, live=True).get("survivors", 0))

    @property
    def output_ended(self) -> bool:
        """True once the output has ended and everything was read (takes
        nothing: what the server says is checked against the reads still
        on their way, so unread text is never reported as the end)."""
        return self._remote.term_output_ended(self._state)

    # -- output

    def read_output(self) -> str:
        """Consuming read: the output since the previous read ('' if
        none). Asks the server unless a read is on its way already (then
        what has arrived is what there is)."""
        self._remote.check_here()
        return self._remote.term_read_now(self._state)

    def read(self, timeout: Optional[float] = None) -> str:
        """Waits until there is output, it has ended, or ``timeout`` seconds
        passed (None: no limit), and takes what there is ('' at the end or
        on timeout). The wait is a long-poll on the server; Ctrl-C stops
        this call, and what the poll brings later goes to the next read."""
        t = _timeout_arg(timeout)
        self._remote.check_here()
        if t == 0:
            return self._remote.term_read_now(self._state)
        self._remote.refuse_blocking()
        deadline = None if t is None or t > _FOREVER_S else time.monotonic() + t
        self._remote.term_await_output(self._state, deadline, keep=False)
        return self._state.taken_or_failure()

    def __aiter__(self) -> "Terminal":
        return self

    def __anext__(self) -> Awaitable[str]:
        """The next chunk of output; StopAsyncIteration once it has ended."""
        self._remote.check_here()
        return self._remote.term_next(self._state)

    # -- input

    def write(self, data: Union[str, bytes]) -> None:
        """Writes ``data`` (str as UTF-8, or bytes) to the terminal's input
        as typed, and returns once the terminal took all of it (a program
        that does not read holds the writer). TerminalClosedError once the
        program has exited. Ctrl-C stops the wait, not the write."""
        pieces = _terminal_pieces(data)
        r = self._remote
        r.check_here()
        if self._state.final:
            raise TerminalClosedError(_INPUT_GONE)
        r.refuse_blocking()
        for reply in r.term_write(self._state, pieces):
            reply.get()

    def write_async(self, data: Union[str, bytes]) -> "asyncio.Future[None]":
        """``write`` as an awaitable that never blocks the event loop."""
        pieces = _terminal_pieces(data)
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        r = self._remote
        r.check_here()
        if self._state.final:
            future.set_exception(TerminalClosedError(_INPUT_GONE))
            return future
        one = _all_answered(loop, future, len(pieces))

        try:
            r.term_write(self._state, pieces, one)
        except BaseException as e:
            future.set_exception(e)
        return future

    def resize(self, rows: _Number, cols: _Number) -> None:
        """Changes the window size (rows and columns, 1 to 65535); the
        foreground group gets SIGWINCH."""
        f_rows = _dimension_number(rows, "terminal.rows")
        f_cols = _dimension_number(cols, "terminal.cols")
        params = {
            "id": self._state.id,
            "rows": _dimension(f_rows, "terminal.rows"),
            "cols": _dimension(f_cols, "terminal.cols"),
        }
        r = self._remote
        r.check_here()
        if self._state.final:
            raise TerminalClosedError(_RESIZE_GONE)
        r.call("terminal_resize", params)

    # -- the foreground

    def inspect_foreground(self) -> Optional[Foreground]:
        """The foreground process group and whether the far kernel shows it
        waiting for input; None once the program has exited."""
        r = self._remote
        r.check_here()
        if self._state.final:
            return None
        value = r.call("terminal_inspect_foreground", {"id": self._state.id})
        with _Shape("terminal_inspect_foreground"):
            fg = value["foreground"]
            if fg is None:
                return None
            fg = _obj(fg)
            return Foreground(
                process_group_id=_int(fg["process_group_id"]), input_waiting=_bool(fg["input_waiting"])
            )

    def wait_input_waiting(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the far kernel shows the foreground group waiting
        for input, ``timeout`` seconds passed (None: no limit), or the
        program exited; returns whether it is waiting. Right after a write
        it is True only once the program took what was written and waits
        again. The server does the watching: one round trip."""
        t = _timeout_arg(timeout)
        r = self._remote
        r.check_here()
        if self._state.final:
            return False
        if t != 0:
            r.refuse_blocking()
        params: Dict[str, Any] = {"id": self._state.id}
        if t is not None and t <= _FOREVER_S:
            params["timeout_ms"] = t * 1000
        value = r.call("terminal_wait_input_waiting", params)
        with _Shape("terminal_wait_input_waiting"):
            return _bool(value["waiting"])

    def signal_foreground(self, signal: Literal["SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP"]) -> int:
        """Sends ``signal`` (``'SIGINT'``, ``'SIGTERM'``, ``'SIGKILL'``,
        ``'SIGTSTP'`` or ``'SIGHUP'``) to the foreground process group and
        returns that group's id. TerminalClosedError when there is none;
        InvalidArgumentError for SIGKILL while the terminal's own program is
        in the foreground (it would end the session: ``terminate()`` does)."""
        name = _required_str(signal, "terminal.signal", "")
        r = self._remote
        r.check_here()
        if self._state.final:
            if name not in _TERMINAL_SIGNALS:
                raise _invalid(
                    "terminal.signal",
                    f"must be one of {', '.join(_TERMINAL_SIGNALS)}, got {json.dumps(name, ensure_ascii=False)}",
                )
            raise TerminalClosedError(_NO_FOREGROUND)
        value = r.call("terminal_signal_foreground", {"id": self._state.id, "signal": name})
        with _Shape("terminal_signal_foreground"):
            return _int(value["process_group_id"])

    # -- the end

    def terminate(self) -> int:
        """Ends every member of the session (SIGHUP and SIGTERM, SIGKILL
        after the grace period) and returns once none is left, with the
        number of survivors (expected: 0). Idempotent."""
        r = self._remote
        r.check_here()
        st = self._state
        if st.final:
            return int(st.snapshot.get("survivors", 0))
        r.refuse_blocking()
        value = r.call("terminal_terminate", {"id": st.id})
        with _Shape("terminal_terminate"):
            return r.term_survivors(st, value)

    def terminate_async(self) -> "asyncio.Future[int]":
        """``terminate`` as an awaitable that never blocks the event loop."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[int]" = loop.create_future()
        r = self._remote
        r.check_here()
        st = self._state
        if st.final:
            future.set_result(int(st.snapshot.get("survivors", 0)))
            return future

        def answered(value: Any, error: Optional[BaseException]) -> None:
            survivors: Optional[int] = None
            if error is None:
                try:
                    with _Shape("terminal_terminate"):
                        survivors = r.term_survivors(st, value)
                except ProtocolError as e:
                    error = e
            _deliver(loop, future, survivors, error)

        try:
            r.conn.request("terminal_terminate", {"id": st.id}, answered)
        except BaseException as e:
            future.set_exception(e)
        return future

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the program exits; TimeoutError after ``timeout``
        seconds (None: no limit). Ctrl-C interrupts the wait, not the program."""
        t = _timeout_arg(timeout)
        r = self._remote
        r.check_here()
        st = self._state
        if st.snapshot["exited"]:
            return
        if t == 0:
            # No time to hear of an exit: ask.
            if r.term_now(st, live=True)["exited"]:
                return
            raise TimeoutError(f"terminal {st.pid} is still running")
        r.refuse_blocking()
        r.term_watch(st)
        if not _wait_event(st.exited, None if t is None or t > _FOREVER_S else t):
            raise TimeoutError(f"terminal {st.pid} is still running")
        if not st.snapshot["exited"] and st.failure is not None:
            raise _fresh(st.failure)

    def wait_async(self) -> "asyncio.Future[None]":
        """An asyncio future that completes (with None) when the program
        exits. Cancelling it leaves nothing behind: one wait per session is
        in flight, however many futures there are."""
        r = self._remote
        r.check_here()
        st = self._state
        future, watch = st.exit_waiters.future(lambda: bool(st.snapshot["exited"]), lambda: st.failure)
        if watch:
            try:
                r.term_watch(st)
            except BaseException as e:
                st.fail(e)
        return future

    def __repr__(self) -> str:
        # From what is known here: a repr never waits on the network.
        s = self._state.snapshot
        signal = s.get("signal")
        return (
            f"Terminal(pid={s['pid']}, exited={_py_bool(bool(s['exited']))}, "
            f"exit_code={s.get('exit_code')!r}, signal={'None' if signal is None else repr(signal)})"
        )
