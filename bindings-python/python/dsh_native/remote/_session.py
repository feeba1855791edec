"""The executor's state behind the public object (``_Remote``): the
connection, the mirrored processes and terminals, listeners, runs on their
way; kept apart so that its threads never keep the public object alive."""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import os
import queue
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TYPE_CHECKING

from .._errors import (
    BlockingCallError,
    DisposedError,
    DshError,
    ForkedChildError,
    InvalidArgumentError,
    NotFoundError,
    TerminalClosedError,
)
from .._helpers import still_waiting
from ._checks import (
    AnswerLost,
    _DISPOSED,
    _fresh,
    _not_found,
    ProtocolError,
    _SIGNAL_POLL,
    _stdin_closed,
    TransportError,
    _type_name,
    _WOULD_BLOCK,
)
from ._results import (
    _bool,
    _compose_delta,
    _int,
    _NOTHING_READ,
    _obj,
    _opt_str,
    OutputChunk,
    _process_read,
    ProcessRead,
    _Shape,
    _snapshot,
    _str,
    _stream_read,
)
from ._transport import _Reply, _report_unraisable, _wait_event
from ._connection import _Connection, _Resumable
from ._process import Process, _ProcState, _ReadCursor
from ._terminal import (
    _FOREVER_MS,
    _KEEP_OUTPUT_S,
    _request_field,
    _term_snapshot,
    Terminal,
    _TermState,
)
from ._run_stream import _RunStream

if TYPE_CHECKING:
    from ._results import RunResult
    from ._transport import _Callback, _Transport


# Set on every listener thread: blocking there would hold every later
# delivery (the local executor refuses it the same way).
_in_listener = threading.local()


class _Remote:
    """The executor's state, apart from the public object so that the
    reader and listener threads never keep that object alive (it is closed
    when it is garbage)."""

    def __init__(self, transport: _Transport) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.states: "weakref.WeakValueDictionary[str, _ProcState]" = weakref.WeakValueDictionary()
        self.listeners: Dict[int, Callable[[Process], object]] = {}
        self.listener_ids = itertools.count(1)
        self.deliveries: Optional["queue.Queue[Optional[_ProcState]]"] = None
        self.dispatcher: Optional[threading.Thread] = None
        self.run_ids = itertools.count(1)
        # run_id → the stream of a run(..., on_output=...) on its way.
        self.run_streams: Dict[str, _RunStream] = {}
        # The runs on their way (sent, not answered), and those of them
        # whose cancel was sent: that is sent again once a dropped session
        # is resumed, since it may have been lost with the drop (the server
        # takes a second cancel of a run as the first).
        self.runs_on_their_way: Set[str] = set()
        self.cancelled_runs: Set[str] = set()
        # None: a process's output is read by the server's consuming read.
        # Where the session can be resumed (keep_session), by offset from
        # this client's own cursors instead, id → cursor.
        self.cursors: Optional[Dict[str, _ReadCursor]] = None
        self.closing = False
        self.ended = False
        self.closed = threading.Event()
        self.stash: Optional[Dict[str, _ProcState]] = None
        self.config: Dict[str, Any] = {}
        self.sandbox_mode: Optional[str] = None
        self.host: Dict[str, Any] = {}
        self.server: Dict[str, Any] = {}
        self.terminals: "weakref.WeakValueDictionary[str, _TermState]" = weakref.WeakValueDictionary()
        self.term_ids = itertools.count(1)
        self.conn = _Connection(transport, self._notified, self._lost)

    # -- calls

    def check_here(self) -> None:
        pid = os.getpid()
        if pid != self.pid:
            raise ForkedChildError(
                f"this belongs to process {self.pid}, and this is its forked child {pid}: create a new Executor here"
            )

    def check_open(self) -> None:
        """For what needs a live executor on the far side (resolve, run, start, …)."""
        self.check_here()
        if self.closing:
            raise DisposedError(_DISPOSED)
        failure = self.conn.failure
        if failure is not None:
            raise _fresh(failure)

    def refuse_blocking(self) -> None:
        if getattr(_in_listener, "active", False):
            raise BlockingCallError(_WOULD_BLOCK)

    def send(self, method: str, params: Dict[str, Any], *, oversize_field: Optional[str] = None) -> _Reply:
        reply = _Reply()
        self.conn.request(method, params, reply.settle, oversize_field=oversize_field)
        return reply

    def call(self, method: str, params: Dict[str, Any], *, oversize_field: Optional[str] = None) -> Any:
        self.check_here()
        return self.send(method, params, oversize_field=oversize_field).get()

    def keep_session(self, session: Any) -> None:
        """After initialize, where the server keeps the session when its
        connection ends (``session`` is its answer's): output is read by
        offset from now on, and a dropped connection is made again."""
        with _Shape("initialize"):
            s = _obj(session)
            token = _str(s["token"])
            linger_ms = _int(s["linger_ms"])
        self.cursors = {}
        self.conn.resume_with(_Resumable(token, linger_ms / 1000, self._resumed))

    def _resumed(self, info: Dict[str, Any]) -> None:
        """The session is back after a dropped connection (on the reader
        thread: nothing here waits). The configuration in force is the
        server's (a reconfigure whose answer was lost may have taken
        effect); each process and terminal session still running here is
        asked again, since a task_done or terminal_exit the server had to
        leave out while nobody listened (``missed``) would never come.
        Output needs nothing: it is read by offset, and reads on their way
        were asked again."""
        with _Shape("initialize"):
            self.config = _obj(info["config"])
            self.sandbox_mode = _opt_str(self.config.get("sandbox_mode"))
        with self.lock:
            states = [st for st in self.states.values() if not st.snapshot["settled"]]
            terminals = [t for t in self.terminals.values() if t.snapshot["pid"] and not t.snapshot["exited"]]
            cancelled = list(self.cancelled_runs)
        for run_id in cancelled:
            self.conn.notify("cancel", {"run_id": run_id})
        for state in states:
            self.conn.request("get", {"id": state.id}, functools.partial(self._refreshed, state))
        for term in terminals:
            self.conn.request("terminal_get", {"id": term.id}, functools.partial(self._term_refreshed, term))

    def _refreshed(self, state: _ProcState, value: Any, error: Optional[BaseException]) -> None:
        if error is not None:
            return
        with _Shape("get"):
            process = _obj(value)["process"]
            if process is None:
                return  # forgotten meanwhile: what is known of it stays
            state = self.apply(_snapshot(process))
        if state.snapshot["settled"]:
            self._announce(state)  # its task_done may be one that was left out

    def _term_refreshed(self, term: _TermState, value: Any, error: Optional[BaseException]) -> None:
        if error is None:
            with _Shape("terminal_get"):
                term.update(_term_snapshot(value["terminal"]))

    def registry(self) -> Optional[Dict[str, _ProcState]]:
        """After ``close``: what the registry held when it closed; else None
        (the server answers). Raises when nothing could be kept (the
        connection was already gone): an empty registry would be a lie."""
        self.check_here()
        if not self.ended:
            return None
        if self.stash is None:
            failure = self.conn.failure
            raise _fresh(failure) if isinstance(failure, TransportError) else DisposedError(_DISPOSED)
        return self.stash

    # -- processes

    def apply(self, snapshot: Dict[str, Any]) -> _ProcState:
        id = str(snapshot["id"])
        with self.lock:
            if self.cursors is not None and id not in self.cursors:
                # Where its consuming reads would start: 0, or for a run
                # handed over at its timeout, just after the run's result.
                output = snapshot.get("output") or {}
                self.cursors[id] = _ReadCursor(int(output.get("stdout_read", 0)), int(output.get("stderr_read", 0)))
            state = self.states.get(id)
            if state is None:
                state = _ProcState(snapshot)
                self.states[id] = state
                return state
        state.update(snapshot)
        return state

    def process(self, snapshot: Any, method: str) -> Process:
        with _Shape(method):
            snap = _snapshot(snapshot)
        return Process(self, self.apply(snap))

    def current(self, state: _ProcState) -> Dict[str, Any]:
        snap = state.snapshot
        if snap["settled"] or os.getpid() != self.pid:
            return snap
        if state.failure is not None:
            raise _fresh(state.failure)
        if self.ended:
            return snap
        found = self.call("get", {"id": state.id})
        with _Shape("get"):
            if found.get("process") is None:
                return state.snapshot  # forgotten: it had settled, and said so
            self.apply(_snapshot(found["process"]))
        return state.snapshot

    def watch(self, state: _ProcState) -> None:
        """Makes sure one ``wait`` for the process is in flight: its answer
        (or a task_done, or the close) settles every waiter."""
        with state.lock:
            if state.wait_sent or state.snapshot["settled"] or state.failure is not None:
                return
            state.wait_sent = True
        if self.ended:
            state.fail(DisposedError(_DISPOSED))
            return

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if error is None:
                try:
                    with _Shape("wait"):
                        self.apply(_snapshot(value["process"]))
                except ProtocolError as e:
                    state.fail(e)
            elif isinstance(error, NotFoundError):
                # Forgotten, so settled; its last facts are what we have.
                state.settled.set()
            else:
                state.fail(error)

        try:
            self.conn.request("wait", {"id": state.id}, answered)
        except BaseException:
            with state.lock:
                state.wait_sent = False
            raise

    def read_output_of(self, state: _ProcState) -> ProcessRead:
        if self.registry() is not None:
            return state.take_final_read()
        try:
            return self.read_output(state.id)
        except NotFoundError:
            return _NOTHING_READ  # forgotten: its output went with it

    def read_output(self, id: str) -> ProcessRead:
        """A consuming read of the process ``id`` (NotFoundError once the
        server no longer has it)."""
        self.check_here()
        return self.begin_read(id)()

    def begin_read(self, id: str) -> Callable[[], ProcessRead]:
        """Sends the read of a process's new output and returns what waits
        for its answer. The server's consuming read; or, where the session
        can be resumed, a read from this client's own offsets: two
        ``read_from``, which a reconnection asks again, the cursor moving
        only once both answers are in."""
        if self.cursors is None:
            reply = self.send("read_output", {"id": id})

            def consumed() -> ProcessRead:
                value = reply.get()
                with _Shape("read_output"):
                    return _process_read(value)

            return consumed
        cursor = self._cursor(id)

        def ask(offsets: Tuple[int, int]) -> Tuple[_Reply, _Reply]:
            return (
                self.send("read_from", {"id": id, "stream": "stdout", "from": offsets[0]}),
                self.send("read_from", {"id": id, "stream": "stderr", "from": offsets[1]}),
            )

        with cursor.lock:
            asked = (cursor.stdout, cursor.stderr)
        replies = ask(asked)

        def by_offset() -> ProcessRead:
            nonlocal asked, replies
            while True:
                try:
                    o_value, e_value = replies[0].get(), replies[1].get()
                except NotFoundError:
                    self.drop_cursor(id)
                    raise
                with _Shape("read_from"):
                    o, e = _stream_read(o_value), _stream_read(e_value)
                with cursor.lock:
                    if (cursor.stdout, cursor.stderr) == asked:
                        cursor.stdout, cursor.stderr = o.next_offset, e.next_offset
                        break
                    # Another read of this process came back first, with
                    # some of this one's text: from where it left off.
                    asked = (cursor.stdout, cursor.stderr)
                replies = ask(asked)
            return ProcessRead(
                delta=_compose_delta(o.text, e.text),
                lossy=o.lossy or e.lossy,
                stdout_spill_path=o.spill_path,
                stderr_spill_path=e.spill_path,
                stdout_spill_error=o.spill_error,
                stderr_spill_error=e.spill_error,
            )

        return by_offset

    def _cursor(self, id: str) -> _ReadCursor:
        """This client's offsets of ``id``. A process not seen yet (a run
        handed over at its timeout) is looked up first: its snapshot says
        where its reads start. NotFoundError for one the server does not
        have."""
        assert self.cursors is not None
        with self.lock:
            cursor = self.cursors.get(id)
        if cursor is None:
            found = self.call("get", {"id": id})
            with _Shape("get"):
                if found["process"] is not None:
                    self.apply(_snapshot(found["process"]))
            with self.lock:
                cursor = self.cursors.get(id)
        if cursor is None:
            raise _not_found(id)
        return cursor

    def drop_cursor(self, id: str) -> None:
        """The process is gone from the server (forgotten), and its output."""
        with self.lock:
            if self.cursors is not None:
                self.cursors.pop(id, None)

    def kill_of(self, state: _ProcState) -> bool:
        if state.snapshot["settled"] or self.registry() is not None:
            return False
        try:
            began = self.call("kill", {"id": state.id})
        except NotFoundError:
            return False
        with _Shape("kill"):
            return _bool(began["began"])

    def stdin_write(self, state: _ProcState, piece: bytes, callback: Optional[_Callback] = None) -> _Reply:
        reply = _Reply()
        done = callback or reply.settle
        if self.registry() is not None:
            raise _stdin_closed(state.id, "exited" if state.snapshot.get("has_stdin_pipe") else "not-piped")
        params = {"id": state.id, "data_base64": base64.b64encode(piece).decode("ascii")}

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if isinstance(error, NotFoundError):  # forgotten, so it has exited
                error = _stdin_closed(state.id, "exited" if state.snapshot.get("has_stdin_pipe") else "not-piped")
            done(None if error is not None else value, error)

        self.conn.request("write_stdin", params, answered)
        return reply

    def close_stdin_of(self, state: _ProcState) -> bool:
        gone = self.registry() is not None
        if not gone:
            try:
                closed = self.call("close_stdin", {"id": state.id})
                with _Shape("close_stdin"):
                    return _bool(closed["closed"])
            except NotFoundError:
                pass
        if not state.snapshot.get("has_stdin_pipe"):
            raise _stdin_closed(state.id, "not-piped")
        return False

    # -- terminal sessions

    def spawn_terminal(self, request: Dict[str, Any]) -> Terminal:
        # The id is chosen here, so that a terminal_exit that overtakes the
        # spawn's answer (the program may exit at once) finds its session.
        tid = f"term-{next(self.term_ids)}"
        state = _TermState(tid)
        with self.lock:
            self.terminals[tid] = state
        field = "request.argv" if "argv" in request else "request.command"
        try:
            try:
                answer = self.call("terminal_spawn", {"request": request, "id": tid}, oversize_field=field)
            except AnswerLost as lost:
                answer = self._spawned_anyway(tid, lost)
            with _Shape("terminal_spawn"):
                state.update(_term_snapshot(answer["terminal"]))
        except InvalidArgumentError as e:
            self._forget_terminal(tid)
            raise _request_field(e) from None
        except (KeyboardInterrupt, SystemExit):
            # Interrupted while it started: nobody will have its handle, so
            # it is ended rather than left running until the close.
            self._forget_terminal(tid)
            self.conn.notify("terminal_terminate", {"id": tid})
            raise
        except BaseException:
            self._forget_terminal(tid)
            raise
        return Terminal(self, state)

    def _spawned_anyway(self, tid: str, lost: AnswerLost) -> Any:
        """A terminal_spawn whose answer a dropped connection lost: the
        session may have been made, and is looked up by the id chosen here
        (``lost`` is raised when it was not)."""
        try:
            return self.call("terminal_get", {"id": tid})
        except TerminalClosedError:
            raise lost from None

    def _forget_terminal(self, tid: str) -> None:
        with self.lock:
            self.terminals.pop(tid, None)

    def term_now(self, st: _TermState, *, live: bool) -> Dict[str, Any]:
        """The session's facts: what is known when it is final (or, unless
        ``live``, once the program exited: exit facts never change), else
        the server's answer now."""
        snap = st.snapshot
        if st.final or os.getpid() != self.pid:
            return snap
        if not live and snap["exited"]:
            return snap
        if st.failure is not None:
            raise _fresh(st.failure)
        if self.ended:
            return snap
        value = self.call("terminal_get", {"id": st.id})
        with _Shape("terminal_get"):
            st.update(_term_snapshot(value["terminal"]))
        return st.snapshot

    def term_output_ended(self, st: _TermState) -> bool:
        with st.lock:
            if st.unread:
                return False
            if st.over:
                return True
        snap = self.term_now(st, live=True)
        if not snap.get("output_ended"):
            return False
        # The server has nothing left: everything went to reads of ours. A
        # long-poll's answer may come after this one, so the reads sent
        # before it must be in before the end can be told.
        with st.lock:
            st.wait_reads(st.reads_sent)
            if st.unread:
                return False
            if not st.reading:
                st.ended = True
            return True

    def start_term_read(self, st: _TermState, n: int, wait_ms: Optional[float]) -> None:
        """Sends read ``n``, the one ``terminal_read`` in flight (the caller
        marked it with ``begin_read``): at once, or a long-poll of
        ``wait_ms``. A Ctrl-C on its way undoes the mark and is raised; any
        other failure is the read's answer."""
        params: Dict[str, Any] = {"id": st.id}
        if wait_ms is not None:
            params["wait_ms"] = wait_ms
        try:
            self.conn.request("terminal_read", params, lambda v, e: self._term_read_answered(st, n, v, e))
        except Exception as e:
            self._term_read_answered(st, n, None, e)
        except BaseException:
            st.read_not_sent(n)
            raise

    def _term_read_answered(self, st: _TermState, n: int, value: Any, error: Optional[BaseException]) -> None:
        again: Optional[int] = None
        failed: Optional[BaseException] = None
        with st.lock:
            st.read_over(n)
            text, ended = "", False
            if error is None:
                try:
                    with _Shape("terminal_read"):
                        text, ended = _str(value["text"]), _bool(value["ended"])
                except ProtocolError as e:
                    error = e
            if error is None:
                if text:
                    st.unread.append(text)
                if ended:
                    st.ended = True
            elif isinstance(error, TerminalClosedError):
                st.ended = True  # the server no longer has it: nothing more will come
            elif isinstance(error, AnswerLost):
                st.lost = error  # the text it brought is gone; the session is not
            else:
                failed = error
            readers = st.serve()
            st.output_waiters = still_waiting(st.output_waiters)
            if failed is None and st.output_waiters and not st.over and st.failure is None and not st.reading:
                # Async readers still wait: the next long-poll, at once.
                again = st.begin_read()
            st.changed.notify_all()
        st.hand(readers)
        if failed is not None:
            st.fail(failed)  # every reader and waiter hears of it
        if again is not None:
            self.start_term_read(st, again, _FOREVER_MS)

    def term_read_now(self, st: _TermState) -> str:
        """``read_output``: one read at once, unless one is on its way
        (then what has arrived is what there is)."""
        mine: Optional[int] = None
        try:
            with st.lock:
                if not (st.reading or st.over or st.failure is not None):
                    mine = st.begin_read()
            if mine is not None:
                self.start_term_read(st, mine, None)
                with st.lock:
                    st.wait_reads(mine)
        except BaseException:
            if mine is not None:
                st.read_not_sent(mine)  # Ctrl-C on the way: the next reader asks
            raise
        return st.taken_or_failure()

    def term_await_output(self, st: _TermState, deadline: Optional[float], *, keep: bool) -> None:
        """Until there is unread output (``keep``: until the output ended,
        taking every piece into ``unread``), the output ended, the
        connection failed, or ``deadline`` passed. Long-polls for the time
        left; a poll already on its way is waited for instead."""
        while True:
            mine: Optional[int] = None
            try:
                with st.lock:
                    if ((st.unread or st.lost is not None) and not keep) or st.over or st.failure is not None:
                        return
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    if st.reading:
                        st.changed.wait(_SIGNAL_POLL if left is None else min(left, _SIGNAL_POLL))
                        continue
                    mine = st.begin_read()
                self.start_term_read(st, mine, _FOREVER_MS if left is None else left * 1000)
            except BaseException:
                if mine is not None:
                    st.read_not_sent(mine)  # Ctrl-C on the way: the next reader asks
                raise

    async def term_next(self, st: _TermState) -> str:
        """``__anext__``: what was read, taken here in one step with the
        return; otherwise a wait for a wake-up (starting a long-poll if
        none is on its way), after which this reader looks again. A reader
        given up while it waited has taken nothing."""
        loop = asyncio.get_running_loop()
        while True:
            mine: Optional[int] = None
            try:
                with st.lock:
                    if st.unread:
                        return st.take()
                    if st.over:
                        raise StopAsyncIteration
                    if st.lost is not None:
                        lost, st.lost = st.lost, None
                        raise lost
                    if st.failure is not None:
                        raise _fresh(st.failure)
                    woken: "asyncio.Future[None]" = loop.create_future()
                    # Readers that gave up, or whose loop is gone, go now
                    # (never from the reader's own `finally`: a finalizer
                    # may run that, on a thread that holds this lock).
                    st.output_waiters = still_waiting(st.output_waiters)
                    st.output_waiters.append((loop, woken))
                    if not st.reading:
                        mine = st.begin_read()
                if mine is not None:
                    self.start_term_read(st, mine, _FOREVER_MS)
            except BaseException:
                if mine is not None:
                    st.read_not_sent(mine)  # Ctrl-C on the way: the next reader asks
                raise
            await woken

    def term_write(self, st: _TermState, pieces: List[Dict[str, str]], callback: Optional[_Callback] = None) -> List[_Reply]:
        """Sends one write's pieces back to back (the server writes them in
        call order); each is answered once the terminal took it."""
        replies: List[_Reply] = []
        with st.write_lock:
            for piece in pieces:
                reply = _Reply()
                replies.append(reply)
                self.conn.request("terminal_write", {"id": st.id, **piece}, callback or reply.settle)
        return replies

    def term_survivors(self, st: _TermState, value: Any) -> int:
        survivors = _int(_obj(value)["survivors"])
        with st.lock:
            st.snapshot = {**st.snapshot, "survivors": survivors}
        return survivors

    def term_watch(self, st: _TermState) -> None:
        """Makes sure one ``terminal_wait`` is in flight: its answer (or a
        terminal_exit, or the close) wakes every waiter."""
        with st.lock:
            if st.watch_sent or st.snapshot["exited"] or st.failure is not None or st.final:
                return
            st.watch_sent = True

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if error is None:
                try:
                    with _Shape("terminal_wait"):
                        st.update(_term_snapshot(value["terminal"]))
                except ProtocolError as e:
                    st.fail(e)
            else:
                st.fail(error)

        try:
            self.conn.request("terminal_wait", {"id": st.id}, answered)
        except BaseException:
            with st.lock:
                st.watch_sent = False
            raise

    def _keep_terminals(self) -> None:
        """At the close, after dispose ended every session: the final facts
        and the last output of each session a handle is left for, so that
        the handles answer afterwards as local ones do. Bounded."""
        with self.lock:
            states = [st for st in self.terminals.values() if st.snapshot["pid"]]
        gets = [(st, self.send("terminal_get", {"id": st.id})) for st in states]
        deadline = time.monotonic() + _KEEP_OUTPUT_S
        for st in states:
            self.term_await_output(st, deadline, keep=True)
        for st, reply in gets:
            try:
                with _Shape("terminal_get"):
                    st.update(_term_snapshot(reply.get()["terminal"]))
            except DshError:
                continue
            with st.lock:
                st.wait_reads(st.reads_sent)
                st.final = True
                readers = st.serve()
                st.changed.notify_all()
            st.hand(readers)

    # -- the reader's news

    def _notified(self, method: str, params: Dict[str, Any]) -> None:
        if method == "terminal_exit":
            snapshot = _term_snapshot(params["terminal"])
            with self.lock:
                st = self.terminals.get(str(snapshot["id"]))
            if st is not None:
                st.update(snapshot)
            return
        if method == "run_output":
            with self.lock:
                stream = self.run_streams.get(params["run_id"])
            if stream is not None:
                name = _str(params["stream"])
                if name not in ("stdout", "stderr"):
                    raise ValueError(f"run_output of a stream named {name!r}")
                data = base64.b64decode(_str(params["data_base64"]), validate=True)
                stream.arrived(OutputChunk("stdout" if name == "stdout" else "stderr", _int(params["offset"]), data))
            return
        if method != "task_done":
            return  # a notification this client did not ask for: not ours to judge
        self._announce(self.apply(_snapshot(params["process"])))

    def _announce(self, state: _ProcState) -> None:
        """Hands a settled process to the task-done listeners, once."""
        if not state.announce():
            return
        with self.lock:
            deliveries = self.deliveries if self.listeners else None
        if deliveries is not None:
            deliveries.put(state)

    # -- streamed runs

    def open_stream(
        self,
        params: Dict[str, Any],
        run_id: str,
        on_output: Optional[Callable[[OutputChunk], object]],
        loop: Optional[asyncio.AbstractEventLoop],
    ) -> Optional[_RunStream]:
        """For ``run(..., on_output=...)``: asks the server to stream the
        run's output and routes its run_output notifications to a new
        stream until ``close_stream``. None without ``on_output``."""
        if on_output is None:
            return None
        if not callable(on_output):
            raise TypeError(f"on_output must be callable, got {_type_name(on_output)}")
        stream = _RunStream(on_output, lambda: self.cancel_run(run_id), loop)
        params["stream"] = True
        with self.lock:
            self.run_streams[run_id] = stream
        return stream

    def send_run(
        self,
        params: Dict[str, Any],
        run_id: str,
        stream: Optional[_RunStream],
        answered: Callable[[Any, Optional[BaseException]], None],
    ) -> None:
        """Sends a run; ``answered`` gets its answer. The run is on its way
        (a cancel may be owed to it) until then; one that could not be sent
        never is, and its stream is closed."""

        def on_answer(value: Any, error: Optional[BaseException]) -> None:
            self.run_answered(run_id)
            answered(value, error)

        with self.lock:
            self.runs_on_their_way.add(run_id)
        try:
            self.conn.request("run", params, on_answer, oversize_field="spec.stdin")
        except BaseException:
            self.run_answered(run_id)
            if stream is not None:
                self.close_stream(run_id, stream)
            raise

    def cancel_run(self, run_id: str) -> None:
        """Asks the server to cancel a run on its way; once it was answered
        there is nothing to cancel (a process it was handed over to is
        killed instead: :meth:`kill_handed_over`)."""
        with self.lock:
            if run_id not in self.runs_on_their_way:
                return
            self.cancelled_runs.add(run_id)
        self.conn.notify("cancel", {"run_id": run_id})

    def kill_handed_over(self, result: Optional[RunResult]) -> None:
        """A run whose ``on_output`` raised is not returned: a process it
        was handed over to at its timeout (the cancel came after the hand-
        over) would run on unseen, so it is killed. Sends without waiting
        (from the event loop too); its answer changes nothing."""
        if result is None or result.background_id is None:
            return
        try:
            self.conn.request("kill", {"id": result.background_id}, lambda value, error: None)
        except DshError:
            pass  # the connection is gone: so is the process, with the session

    def run_answered(self, run_id: str) -> None:
        """The run's answer came (or it was never sent): no cancel is owed.
        (:meth:`send_run` calls it.)"""
        with self.lock:
            self.runs_on_their_way.discard(run_id)
            self.cancelled_runs.discard(run_id)

    def close_stream(self, run_id: str, stream: _RunStream) -> None:
        """The run's answer came (or it was never sent): nothing follows.
        The chunks before it are still handed over."""
        with self.lock:
            self.run_streams.pop(run_id, None)
        stream.end()

    def _lost(self, failure: BaseException) -> None:
        with self.lock:
            states = list(self.states.values())
            terminals = list(self.terminals.values())
        for state in states:
            state.fail(failure)
        for terminal in terminals:
            terminal.fail(failure)

    # -- listeners

    def subscribe(self, callback: Callable[[Process], object]) -> int:
        with self.lock:
            id = next(self.listener_ids)
            if self.closing:
                return id
            if self.dispatcher is None:
                self.deliveries = queue.Queue()
                self.dispatcher = threading.Thread(
                    target=self._deliver_all, args=(self.deliveries,), name="dsh-remote-listeners", daemon=True
                )
                self.dispatcher.start()
            self.listeners[id] = callback
        return id

    def _deliver_all(self, deliveries: "queue.Queue[Optional[_ProcState]]") -> None:
        _in_listener.active = True
        while True:
            state = deliveries.get()
            if state is None:
                return
            with self.lock:
                listeners = list(self.listeners.values())
            for listener in listeners:
                try:
                    listener(Process(self, state))
                except BaseException as e:
                    _report_unraisable(e, listener)

    # -- the end

    def close(self) -> None:
        if os.getpid() != self.pid:
            # A forked child's copy: the connection is the parent's.
            self.closing = self.ended = True
            self.closed.set()
            return
        self.refuse_blocking()
        with self.lock:
            first = not self.closing
            self.closing = True
        if not first:
            _wait_event(self.closed, None)
            return
        try:
            try:
                try:
                    self.send("dispose", {}).get()
                except AnswerLost:
                    # The connection dropped and came back meanwhile; a
                    # second dispose is harmless, and the first may never
                    # have reached the server.
                    self.send("dispose", {}).get()
                self._keep_registry()
                self._keep_terminals()
            except (TransportError, DisposedError):
                pass  # the far side disposes by itself when the connection ends
            with self.lock:
                deliveries, dispatcher = self.deliveries, self.dispatcher
            if deliveries is not None and dispatcher is not None:
                deliveries.put(None)  # after every delivery already queued
                dispatcher.join()
        finally:
            with self.lock:
                self.listeners.clear()
            self.conn.shutdown()
            self.ended = True
            with self.lock:
                states = list(self.states.values())
                terminals = list(self.terminals.values())
            for state in states:
                state.fail(DisposedError(_DISPOSED))
            for terminal in terminals:
                terminal.fail(DisposedError(_DISPOSED))
            self.closed.set()

    def _keep_registry(self) -> None:
        """Fetches every process's final facts and unread output before the
        connection ends, so that handles and by-id calls keep answering
        after ``close`` as they do locally. The reads are sent together:
        one round trip, not one per process."""
        listed = self.send("list", {}).get()
        with _Shape("list"):
            snapshots = [_snapshot(p) for p in listed["processes"]]
        states = [self.apply(snap) for snap in snapshots]
        reads = [(state, self.begin_read(state.id)) for state in states]
        stash: Dict[str, _ProcState] = {}
        for state, read in reads:
            try:
                state.final_read = read()
            except NotFoundError:
                pass
            stash[state.id] = state
        self.stash = stash
