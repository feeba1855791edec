"""The connection: JSON-RPC over a transport, one reader thread, every call's
answer matched to it; when the transport ends, a lingering session is
resumed over a new one (or every pending call fails)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, TYPE_CHECKING

from .._errors import DisposedError
from ._checks import (
    AnswerLost,
    _CLIENT,
    _DISPOSED,
    _error_from_rpc,
    _excerpt,
    _fresh,
    _invalid,
    _MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    _READING_METHODS,
    _RECONNECT_FIRST_S,
    _RECONNECT_MOST_S,
    TransportError,
)
from ._results import _obj, _Shape
from ._transport import _report_unraisable

if TYPE_CHECKING:
    from ._transport import _Callback, _Transport


# Writes that reach a process or terminal in the order they were made: once
# one of them is lost with a connection, the ones queued behind it to the
# same target are not sent (the bytes would arrive out of order).
_ORDERED_WRITES = frozenset({"write_stdin", "close_stdin", "terminal_write"})


class _Pending(NamedTuple):
    method: str
    params: Dict[str, Any]
    callback: _Callback


class _Resumable(NamedTuple):
    """A session the server keeps after its connection ends (``dsh serve
    --linger``), and what this client does to take it back."""

    token: str
    linger_s: float
    # Called on the reader thread once the session is back, with the answer
    # to the resuming initialize; must not wait for an answer itself.
    on_resumed: Callable[[Dict[str, Any]], None]


class _TryAgain(Exception):
    """A reconnection attempt failed in a way the next one may not (the
    transport ended before the answer came, or the server has not seen the
    end of the connection that dropped yet); the message says how."""


class _Refused(Exception):
    """The server will not resume the session (its time passed, or it was
    never made there); the message is the server's."""


# The JSON-RPC error a resume gets while the session is still attached to
# the connection that dropped (its end not seen by the server yet): the
# next attempt, a moment later, succeeds.
_INVALID_REQUEST = -32600


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Connection:
    """JSON-RPC over a transport: requests out, answers matched to their
    callers by id, notifications handed on, and one failure for everything
    pending when the stream ends. One reader thread; writers take turns.

    Where the session lingers (``resume_with``), an end nobody asked for is
    not the end: the reader starts the transport again and resumes the
    session, while lines wait in the outbox, then sorts the calls that were
    on their way by what the server says it still owes (``_resumed``)."""

    def __init__(
        self,
        transport: _Transport,
        on_notification: Callable[[str, Dict[str, Any]], None],
        on_lost: Callable[[BaseException], None],
    ) -> None:
        self.transport = transport
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, _Pending] = {}
        self._failure: Optional[BaseException] = None
        self._closing = False
        # False while the connection is being made again: lines wait in the
        # outbox (with their request's id; None for a notification), and go
        # out in order after the resume, before any new one.
        self._live = True
        self._outbox: List[Tuple[Optional[int], bytes]] = []
        # Lines whose write failed (the transport was dead) since the last
        # resume: never taken, since the server takes no line it did not
        # get whole, so they go out again after the next resume.
        self._unsent: List[Tuple[Optional[int], bytes]] = []
        # How many resumes sorted the calls on their way: a write that fails
        # after a resume already sorted its call is no longer for _unsent.
        self._resumes = 0
        self._resumable: Optional[_Resumable] = None
        # How long a resume attempt may go unanswered before it is ended and
        # tried again (the executor's connect_timeout_ms; None: until the
        # session's linger time has passed), and those words for errors.
        self.connect_s: Optional[float] = None
        self.connect_text = ""
        # Set by shutdown: the pause between two reconnection attempts ends.
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="dsh-remote-reader", daemon=True)
        self._reader.start()

    @property
    def failure(self) -> Optional[BaseException]:
        return self._failure

    def resume_with(self, resumable: _Resumable) -> None:
        """From now on an unexpected end is followed by a reconnection."""
        self._resumable = resumable

    def _transport_error(self, message: str) -> TransportError:
        e = TransportError(message)
        e.transport = self.transport.description
        return e

    def request(
        self,
        method: str,
        params: Dict[str, Any],
        callback: _Callback,
        *,
        oversize_field: Optional[str] = None,
    ) -> None:
        """Sends a request; ``callback(result, error)`` is called once, on
        the reader thread (or here, if the connection is already gone)."""
        with self._lock:
            failure = self._failure
            id = next(self._ids)
        if failure is not None:
            raise _fresh(failure)
        line = _encode({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        if len(line) - 1 > _MAX_MESSAGE_BYTES:
            field = oversize_field or method
            raise _invalid(
                field,
                f"makes a {method} message of {len(line) - 1} bytes, more than the "
                f"{_MAX_MESSAGE_BYTES} one message may hold (send large input through "
                "stdin=PIPE and Process.write_stdin, which goes in pieces)",
            )
        with self._lock:
            if self._failure is not None:
                raise _fresh(self._failure)
            self._pending[id] = _Pending(method, params, callback)
            route = self._route(id, line)
        if route is not None:
            self._write_line(route, id, line)

    def notify(self, method: str, params: Dict[str, Any]) -> None:
        """Sends a notification (no answer, not even an error)."""
        line = _encode({"jsonrpc": "2.0", "method": method, "params": params})
        with self._lock:
            if self._failure is not None:
                return
            route = self._route(None, line)
        if route is not None:
            self._write_line(route, None, line)

    def _route(self, id: Optional[int], line: bytes) -> Optional[Tuple[_Transport, int]]:
        """Where one message (``id``: its request's, None for a
        notification) goes now (lock held): the transport, with the count of
        resumes so far; or None, kept in the outbox while the connection is
        being made again."""
        if self._live:
            return self.transport, self._resumes
        self._outbox.append((id, line))
        return None

    def _write_line(self, route: Tuple[_Transport, int], id: Optional[int], line: bytes) -> None:
        transport, resumes = route
        if self._write(transport, line):
            return
        with self._lock:
            # Not sorted by a resume yet: it goes out again after the next.
            if self._resumable is not None and self._resumes == resumes and self._failure is None:
                self._unsent.append((id, line))

    def _write(self, transport: _Transport, data: bytes) -> bool:
        """False when the transport is gone (it is ended from here): the
        reader sees its end and fails every pending call with how the
        transport ended, or reconnects and sorts them out."""
        try:
            with transport.write_lock:
                transport.write(data)
            return True
        except (OSError, ValueError):
            transport.terminate()
            return False

    def _read_loop(self) -> None:
        while True:
            failure = self._read_to_end()
            if failure is None:
                resumable = self._resumable
                if self._closing:
                    failure = DisposedError(_DISPOSED)
                elif resumable is None:
                    failure = self._transport_error(self.transport.ended())
                else:
                    try:
                        failure = self._reconnect(resumable)
                    except Exception as e:  # a bug here: never a silent hang
                        failure = self._transport_error(f"reconnecting to `{self.transport.description}` failed: {e!r}")
                    if failure is None:
                        continue
            break
        with self._lock:
            if self._failure is None:
                self._failure = failure
            pending = list(self._pending.values())
            self._pending.clear()
            self._outbox.clear()
            self._unsent.clear()
        for p in pending:
            self._call_back(p.callback, None, _fresh(failure))
        try:
            self._on_lost(failure)
        except BaseException as e:
            _report_unraisable(e, self._on_lost)

    def _read_to_end(self) -> Optional[BaseException]:
        """Takes the transport's lines until it ends: None then; else why
        the stream cannot be read any more (it is ended from here)."""
        transport = self.transport
        try:
            while True:
                line = transport.read_line()
                if not line:
                    return None
                if line.strip():
                    self._dispatch(line)
        except ProtocolError as e:
            transport.terminate()
            return e
        except Exception as e:  # a read error, or a bug here: never a silent hang
            failure = self._transport_error(f"reading from the transport `{transport.description}` failed: {e!r}")
            transport.terminate()
            return failure

    # -- reconnecting

    def _reconnect(self, resumable: _Resumable) -> Optional[BaseException]:
        """The transport ended, not by our hand, while the server keeps the
        session: makes the connection again and resumes the session, trying
        again after a pause (doubling, up to a most) until the session's
        linger time has passed since the loss. None once resumed; else the
        failure for everything pending."""
        deadline = time.monotonic() + resumable.linger_s
        with self._lock:
            self._live = False
        lost = self.transport
        how = lost.ended()
        lost.reap()
        pause = _RECONNECT_FIRST_S
        last = "it could not be made yet"
        while True:
            if self._closing:
                return DisposedError(_DISPOSED)
            try:
                attempt = lost.reopen()
            except TransportError as e:
                return self._transport_error(f"{how}; it cannot be started again to resume the session: {e}")
            if attempt is not None:
                with self._lock:
                    self.transport = attempt  # so that shutdown ends it
                if self._closing:
                    attempt.reap()
                    return DisposedError(_DISPOSED)
                try:
                    answer = self._resume_on(attempt, resumable.token, deadline)
                except _TryAgain as e:
                    last = str(e)
                    attempt.reap()
                except (_Refused, ProtocolError) as e:
                    attempt.reap()
                    return self._transport_error(f"{how}; the server did not resume the session: {e}")
                else:
                    self._resumed(attempt, answer, how, resumable)
                    return None
            left = deadline - time.monotonic()
            if left <= 0:
                return self._transport_error(
                    f"{how}; the session could not be resumed within the {resumable.linger_s:g} s "
                    f"the server keeps it; the last attempt: {last}"
                )
            self._stop.wait(min(pause, left))
            pause = min(pause * 2, _RECONNECT_MOST_S)

    def _resume_on(self, attempt: _Transport, token: str, deadline: float) -> Dict[str, Any]:
        """Sends ``initialize {resume}`` on a new transport and takes its
        answer, the first thing the server sends (what it kept follows).
        The attempt is ended at the connect timeout (to be tried again) or
        at the deadline, however far it got."""
        id = next(self._ids)
        params = {"protocol_version": PROTOCOL_VERSION, "resume": token, "client": _CLIENT}
        # Ended at the connect timeout, to be tried again, or at the
        # deadline: ssh to a host that does not answer hangs.
        left = max(0.0, deadline - time.monotonic())
        silent = self.connect_s is not None and self.connect_s < left
        cut = threading.Event()

        def end_attempt() -> None:
            cut.set()
            attempt.terminate()

        watchdog = threading.Timer(self.connect_s if silent and self.connect_s is not None else left, end_attempt)
        watchdog.daemon = True
        watchdog.start()
        try:
            self._write(attempt, _encode({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params}))
            while True:
                try:
                    line = attempt.read_line()
                except OSError as e:
                    raise _TryAgain(f"reading from `{attempt.description}` failed: {e!r}") from None
                if not line:
                    if cut.is_set() and silent:
                        raise _TryAgain(
                            f"`{attempt.description}` did not answer the resume within "
                            f"{self.connect_text} ms (connect_timeout_ms), so it was ended"
                        )
                    raise _TryAgain(attempt.ended())
                if not line.strip():
                    continue
                try:
                    message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
                except (UnicodeDecodeError, ValueError):
                    message = None
                if isinstance(message, dict) and message.get("id") == id and "method" not in message:
                    break
                self._dispatch(line)  # anything else, as always (the server sends nothing before)
        finally:
            watchdog.cancel()
        error = message.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            if isinstance(error, dict) and error.get("code") == _INVALID_REQUEST:
                raise _TryAgain(f"the server said: {said}")
            raise _Refused(said)
        with _Shape("initialize"):
            info = _obj(message["result"])
            session = _obj(info["session"])
            if session["resumed"] is not True:
                raise ValueError("the session was not resumed")
            if not isinstance(session["pending"], list):
                raise TypeError("session.pending is not a list")
        return info

    def _hold_writes_behind(self, lost: List[_Pending]) -> List[_Pending]:
        """Takes out of the queues (under the lock) the writes waiting to go
        to a target one of the ``lost`` writes was for, and returns them."""
        broken = {p.params.get("id") for p in lost if p.method in _ORDERED_WRITES}
        if not broken:
            return []

        def behind(id: Optional[int]) -> bool:
            p = self._pending.get(id) if id is not None else None
            return p is not None and p.method in _ORDERED_WRITES and p.params.get("id") in broken

        held: List[_Pending] = []
        for queue in (self._unsent, self._outbox):
            ids = [id for id, _ in queue if behind(id)]
            queue[:] = [(id, line) for id, line in queue if id not in ids]
            held.extend(self._pending.pop(id) for id in ids if id is not None)
        return held

    def _resumed(self, transport: _Transport, info: Dict[str, Any], how: str, resumable: _Resumable) -> None:
        """The session is back on ``transport``. A call that was on its way
        waits on when the server says it still owes the answer (``pending``);
        one that only reads is asked again; any other fails with AnswerLost.
        Then what never got through and what waited for the connection go
        out, in order, before any new line."""
        owed = {id for id in info["session"]["pending"] if _is_id(id)}
        lost: List[_Pending] = []
        lines: List[bytes] = []
        with self._lock:
            waiting = {id for id, _ in self._outbox + self._unsent if id is not None}
            for id, p in list(self._pending.items()):
                if id in owed or id in waiting:
                    continue
                if p.method in _READING_METHODS:
                    lines.append(_encode({"jsonrpc": "2.0", "id": id, "method": p.method, "params": p.params}))
                else:
                    lost.append(self._pending.pop(id))
            held = self._hold_writes_behind(lost)
            lines.extend(line for _, line in self._unsent)
            self._unsent.clear()
            self._resumes += 1
        while True:
            with self._lock:
                lines.extend(line for _, line in self._outbox)
                self._outbox.clear()
                if not lines:
                    self._live = True
                    break
            self._write(transport, b"".join(lines))
            lines = []
        def fail(p: _Pending, message: str) -> None:
            e = AnswerLost(message)
            e.transport = transport.description
            e.method = p.method
            self._call_back(p.callback, None, e)

        for p in lost:
            fail(
                p,
                f"the connection to the server dropped before the answer to {p.method} came ({how}); "
                f"the session was resumed, but {p.method} may have taken effect or not",
            )
        for p in held:
            fail(
                p,
                f"{p.method} was not sent: an earlier write to {p.params.get('id')!r} was lost with the "
                f"connection ({how}), and this one would have reached it out of order",
            )
        try:
            resumable.on_resumed(info)
        except BaseException as e:
            _report_unraisable(e, resumable.on_resumed)

    # -- what the server sends

    def _broken(self, what: str, line: bytes) -> ProtocolError:
        e = ProtocolError(
            f"the server behind `{self.transport.description}` broke the protocol: {what}: {_excerpt(line)}"
        )
        e.transport = self.transport.description
        return e

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as e:
            raise self._broken(f"a line that is not JSON ({e})", line) from None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise self._broken("a line that is not a JSON-RPC 2.0 message", line)
        if "method" in message:
            params = message.get("params", {})
            if "id" in message or not isinstance(message["method"], str) or not isinstance(params, dict):
                raise self._broken("a request or a malformed notification (it only answers and notifies)", line)
            try:
                self._on_notification(message["method"], params)
            except (KeyError, TypeError, ValueError) as e:
                raise self._broken(f"a notification of the wrong shape ({e!r})", line) from None
            return
        id = message.get("id")
        if id is None:
            error = message.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            raise self._broken(f"it could not read a message from this client ({said})", line)
        with self._lock:
            pending = self._pending.pop(id, None) if _is_id(id) else None
        if pending is None:
            raise self._broken("an answer to a request this client did not send", line)
        if "error" in message:
            self._call_back(pending.callback, None, _error_from_rpc(message["error"], pending.method, pending.params))
        elif "result" in message:
            self._call_back(pending.callback, message["result"], None)
        else:
            self._call_back(
                pending.callback, None, self._broken(f"an answer to {pending.method} without result or error", line)
            )

    @staticmethod
    def _call_back(callback: _Callback, value: Any, error: Optional[BaseException]) -> None:
        try:
            callback(value, error)
        except BaseException as e:  # never lose the reader thread to a callback
            _report_unraisable(e, callback)

    def shutdown(self, patience_s: float = 10.0) -> None:
        """Ends the connection from our side, waits (``patience_s``, then as
        long again after ending the transport, at most 5 s) for the server
        to finish and the reader to see the end, and releases the transport."""
        self._closing = True
        self._stop.set()
        transport = self.transport
        try:
            with transport.write_lock:
                transport.end_input()
        except Exception:
            pass
        reader_here = threading.current_thread() is self._reader
        if not reader_here:
            self._reader.join(timeout=patience_s)
            if self._reader.is_alive():
                self.transport.terminate()
                self._reader.join(timeout=min(5.0, patience_s))
        self.transport.reap(reading=not reader_here and self._reader.is_alive())

    def abandon(self) -> None:
        """Ends the connection without waiting (from a finalizer, which may
        run on any thread, the reader's included)."""
        self._closing = True
        self._stop.set()
        threading.Thread(target=self.shutdown, name="dsh-remote-close", daemon=True).start()


def _encode(message: Dict[str, Any]) -> bytes:
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text + "\n").encode("utf-8")
