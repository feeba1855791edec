"""Transports: a command speaking the protocol on its stdin and stdout
(``ssh host dsh serve --stdio``) or a unix socket; and the small pieces the
connection's callers wait with (``_Reply``, deliveries to an event loop,
unraisable errors of callbacks)."""

from __future__ import annotations

import asyncio
import errno as _errno
import os
import shlex
import signal
import socket as _socket
import subprocess
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any, Callable, List, NamedTuple, Optional, Tuple, Type

from .._helpers import resolve_future, still_waiting
from ._checks import _fresh, _SIGNAL_POLL, _STDERR_TAIL_BYTES, TransportError


def _wait_event(event: threading.Event, timeout: Optional[float]) -> bool:
    """``event.wait(timeout)`` in slices, so that Ctrl-C is seen promptly
    whichever thread the signal was delivered to."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = _SIGNAL_POLL if deadline is None else min(_SIGNAL_POLL, deadline - time.monotonic())
        if step <= 0:
            return event.is_set()
        if event.wait(step):
            return True


_Callback = Callable[[Any, Optional[BaseException]], None]


class _Reply:
    """The answer to one request, for a thread that blocks on it."""

    __slots__ = ("_event", "_value", "_error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None

    def settle(self, value: Any, error: Optional[BaseException]) -> None:
        self._value, self._error = value, error
        self._event.set()

    def wait(self, timeout: Optional[float]) -> bool:
        return _wait_event(self._event, timeout)

    def get(self) -> Any:
        self.wait(None)
        if self._error is not None:
            raise self._error
        return self._value


def _deliver(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]", value: Any, error: Optional[BaseException]) -> None:
    try:
        loop.call_soon_threadsafe(resolve_future, future, value, error)
    except RuntimeError:  # the loop is closed: nobody is waiting
        pass


def _all_answered(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[None]", count: int) -> "_Callback":
    """The callback of each of ``count`` calls that make one write: settles
    ``future`` with the first failure, or with None once every call was
    answered."""
    left = [count]
    lock = threading.Lock()

    def one(value: Any, error: Optional[BaseException]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if error is not None:
            _deliver(loop, future, None, error)
        elif last:
            _deliver(loop, future, None, None)

    return one


class _FactWaiters:
    """Futures waiting for one fact to hold (a process settled, a program
    exited), each on its own loop. A cancelled one is withdrawn, and one
    whose loop was closed is dropped by the next, so polling
    (``asyncio.wait_for`` timing out) never accumulates. Guarded by the
    owner's lock."""

    __slots__ = ("lock", "waiting")

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.waiting: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []

    def future(
        self, holds: Callable[[], bool], failure: Callable[[], Optional[BaseException]]
    ) -> "Tuple[asyncio.Future[None], bool]":
        """A future of the fact, on the running loop, settled at once when
        the fact holds or the connection failed; else waiting, and True:
        the caller then has the fact watched."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        with self.lock:
            if holds():
                future.set_result(None)
                return future, False
            failed = failure()
            if failed is not None:
                future.set_exception(_fresh(failed))
                return future, False
            self.waiting = still_waiting(self.waiting)
            self.waiting.append((loop, future))

        def withdraw(f: "asyncio.Future[None]") -> None:
            if f.cancelled():
                with self.lock:
                    self.waiting = [w for w in self.waiting if w[1] is not f]

        future.add_done_callback(withdraw)
        return future, True

    def take(self) -> List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]]:
        """Every waiting future, to be told (lock held)."""
        waiting, self.waiting = self.waiting, []
        return waiting

    @staticmethod
    def tell(waiting: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]], error: Optional[BaseException]) -> None:
        """The fact holds (``error`` None), or the connection failed."""
        for loop, future in waiting:
            _deliver(loop, future, None, None if error is None else _fresh(error))


# Unraisable errors of listeners -------------------------------------------------


class _UnraisableHookArgs(NamedTuple):
    exc_type: Type[BaseException]
    exc_value: BaseException
    exc_traceback: Optional[TracebackType]
    err_msg: Optional[str]
    object: object


def _report_unraisable(exc: BaseException, obj: object) -> None:
    """Reports a listener's exception through ``sys.unraisablehook``, as the
    local executor does. The interpreter's own hook takes only its own
    argument type, which Python code cannot make: that case prints what the
    hook would."""
    hook = sys.unraisablehook
    try:
        if hook is sys.__unraisablehook__:
            print(f"Exception ignored in: {obj!r}", file=sys.stderr)
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        else:
            hook(_UnraisableHookArgs(type(exc), exc, exc.__traceback__, None, obj))  # type: ignore[arg-type]
    except BaseException:
        pass


# Transports ----------------------------------------------------------------------


class _Transport:
    """A byte stream to the server: lines out, lines in, and how it ended."""

    description: str

    def __init__(self) -> None:
        # Writers take turns, so that lines never interleave.
        self.write_lock = threading.Lock()

    def reopen(self) -> Optional["_Transport"]:
        """The same connection made again, for a reconnection: None when it
        cannot be made now but may be soon; TransportError when it cannot
        be made at all."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read_line(self) -> bytes:
        raise NotImplementedError

    def end_input(self) -> None:
        """Our side is done: the server disposes its executor and exits."""
        raise NotImplementedError

    def terminate(self) -> None:
        """Ends the stream now, from our side (a broken protocol, a hang)."""
        raise NotImplementedError

    def ended(self) -> str:
        """After the end of the input: how it ended, for the error message
        (may wait a moment for the transport to exit)."""
        raise NotImplementedError

    def reap(self, reading: bool = False) -> None:
        """Releases everything; bounded. ``reading``: a thread may still be
        blocked reading the stream (a process that left the transport's
        group holds it open): what it reads is left to it, since closing it
        under that read would wait for the read."""
        raise NotImplementedError


class _CommandTransport(_Transport):
    def __init__(self, argv: List[str]) -> None:
        super().__init__()
        self.argv = argv
        self.description = shlex.join(argv)
        try:
            # Its own session: a Ctrl-C at the terminal aborts the run that
            # waits (as locally), it does not kill the connection under it.
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            err = TransportError(f"cannot start the transport {self.description}: {e}")
            err.transport = self.description
            raise err from e
        self._tail = bytearray()
        self._tail_lock = threading.Lock()
        self._stderr = threading.Thread(target=self._drain_stderr, name="dsh-remote-stderr", daemon=True)
        self._stderr.start()

    def _drain_stderr(self) -> None:
        pipe = self._proc.stderr
        assert pipe is not None
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self._tail_lock:
                self._tail += chunk
                del self._tail[:-_STDERR_TAIL_BYTES]

    def stderr_tail(self) -> str:
        with self._tail_lock:
            return bytes(self._tail).decode("utf-8", "replace").strip()

    def reopen(self) -> Optional[_Transport]:
        # A command that cannot be started now will not be later (it is
        # missing, or not executable); one that starts and then fails (ssh
        # with the network down) is tried again by the caller.
        return _CommandTransport(self.argv)

    def write(self, data: bytes) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        pipe.write(data)
        pipe.flush()

    def read_line(self) -> bytes:
        pipe = self._proc.stdout
        assert pipe is not None
        return pipe.readline()

    def end_input(self) -> None:
        pipe = self._proc.stdin
        if pipe is not None and not pipe.closed:
            try:
                pipe.close()
            except OSError:
                pass

    def terminate(self) -> None:
        # The whole process group it leads (a session of its own): a child
        # of the transport (a shell's) would hold its pipes open. Only while
        # it is not reaped, when its pid, the group's id, is still its own.
        if self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def ended(self) -> str:
        try:
            code = self._proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.terminate()
            code = self._proc.wait()
        self._stderr.join(timeout=1)
        if code >= 0:
            how = f"exited with status {code}"
        else:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        tail = self.stderr_tail()
        said = f"; its stderr ends with:\n{tail}" if tail else " (its stderr is empty)"
        return f"the transport `{self.description}` {how}{said}"

    def reap(self, reading: bool = False) -> None:
        self.end_input()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.terminate()
            self._proc.wait()
        self._stderr.join(timeout=1)
        # A pipe a reader is still blocked on (held open by a process that
        # left the group) stays open for it: closing stdout would wait for
        # its read, and closing the descriptor the stderr drain reads by
        # number could hand that number to another file.
        pipes = [] if reading else [self._proc.stdout]
        if not self._stderr.is_alive():
            pipes.append(self._proc.stderr)
        for pipe in pipes:
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def _no_answer(transport: _Transport, timeout_text: str) -> TransportError:
    tail = transport.stderr_tail() if isinstance(transport, _CommandTransport) else ""
    said = f"; its stderr ends with:\n{tail}" if tail else ""
    e = TransportError(
        f"the transport `{transport.description}` did not answer initialize within {timeout_text} ms "
        f"(connect_timeout_ms), so it was ended{said}"
    )
    e.transport = transport.description
    return e


# A unix socket's connect is given a timeout only to make it the socket's
# non-blocking one: a server that takes no connection (its queue full, it
# is stopped) is EAGAIN at once instead of a connect that waits for ever.
_SOCKET_CONNECT_S = 30.0


class _SocketTransport(_Transport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.description = f"unix:{path}"
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._sock.settimeout(_SOCKET_CONNECT_S)
            self._sock.connect(path)
            self._sock.settimeout(None)
        except OSError as e:
            self._sock.close()
            err = TransportError(f"cannot connect to {self.description}: {e}")
            err.transport = self.description
            raise err from e
        self._reader = self._sock.makefile("rb")

    def reopen(self) -> Optional[_Transport]:
        try:
            return _SocketTransport(self.path)
        except TransportError as e:
            # A full listen queue empties; a socket nobody listens at means
            # the server is gone, and the sessions it kept with it.
            if isinstance(e.__cause__, OSError) and e.__cause__.errno == _errno.EAGAIN:
                return None
            raise

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_line(self) -> bytes:
        return self._reader.readline()

    def end_input(self) -> None:
        try:
            self._sock.shutdown(_socket.SHUT_WR)
        except OSError:
            pass

    def terminate(self) -> None:
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    def ended(self) -> str:
        return f"the server at {self.description} closed the connection"

    def reap(self, reading: bool = False) -> None:
        # Shut down, the socket wakes a read blocked on it.
        self.terminate()
        for closer in (self._reader.close, self._sock.close):
            try:
                closer()
            except OSError:
                pass
