"""``Executor``: the local executor's API, driving ``dsh serve`` over a
transport."""

from __future__ import annotations

import asyncio
import atexit
import base64
import os
import weakref
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TYPE_CHECKING,
    Union,
)

from .._errors import AlreadyCancelledError, DshError, InvalidArgumentError
from .._helpers import resolve_future
from ._checks import (
    _ALREADY_CANCELLED,
    _argv_list,
    _CANCEL_POLL,
    _CLIENT,
    _config_params,
    _connect_timeout,
    _CONNECT_TIMEOUT_MS,
    _id_arg,
    _invalid,
    _is_pipe,
    _limits,
    _not_found,
    _number,
    _optional_str,
    _path,
    _policy,
    PROTOCOL_VERSION,
    ProtocolError,
    _required_str,
    _SIGNAL_POLL,
    _string_map,
    _type_name,
    _utf8,
)
from ._results import _bool, _obj, _opt_str, _py_bool, _run_result, _Shape, Spec
from ._transport import _CommandTransport, _deliver, _no_answer, _Reply, _SocketTransport
from ._process import Process, Unsubscribe
from ._session import _Remote

if TYPE_CHECKING:
    from .._native import (
        CancelToken,
        _Limits,
        _SandboxModeName,
        SandboxPolicy as _NativeSandboxPolicy,
    )
    from ._checks import _FsPath, _Number, _Path, SandboxPolicy
    from ._results import OutputChunk, ProcessRead, RunResult
    from ._transport import _Transport
    from ._process import _ProcState
    from ._terminal import Terminal
    from ._run_stream import _RunStream


# Executors still open at interpreter exit are closed, so no command they
# started outlives the program (as the local ones).
_open_executors: "weakref.WeakSet[Executor]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for executor in list(_open_executors):
        try:
            executor.close()
        except DshError:
            pass


def _transport(command: Optional[Sequence[str]], socket: Optional[_Path]) -> _Transport:
    if (command is None) == (socket is None):
        raise TypeError(
            "Executor() takes exactly one of command= (a transport command, such as "
            "['ssh', 'host', 'dsh', 'serve', '--stdio']) and socket= (the path of a "
            "`dsh serve --listen unix:PATH` socket)"
        )
    if command is not None:
        if isinstance(command, (str, bytes)) or not isinstance(command, Sequence):
            raise TypeError(f"command must be a list of str (the transport's argv), got {_type_name(command)}")
        argv: List[str] = []
        for i, arg in enumerate(command):
            if isinstance(arg, os.PathLike):
                arg = os.fspath(arg)
            if not isinstance(arg, str):
                raise TypeError(f"command must be a list of str, item {i} is {_type_name(arg)}")
            argv.append(arg)
        if not argv:
            raise ValueError("command is empty: it must name the transport program")
        return _CommandTransport(argv)
    path = os.fspath(socket) if isinstance(socket, os.PathLike) else socket
    if not isinstance(path, str):
        raise TypeError(f"socket must be a str or os.PathLike, got {_type_name(socket)}")
    return _SocketTransport(path)


class Executor:
    """A bash executor on the far side of a transport, with the API of
    ``dsh_native.Executor`` (docs/protocol.md).

    Exactly one of:

    - ``command``: a program that speaks the protocol on its stdin and
      stdout, started here: ``["ssh", "build-1", "dsh", "serve", "--stdio"]``,
      ``["kubectl", "exec", "-i", "pod", "--", "dsh", "serve", "--stdio"]``.
    - ``socket``: the path of a ``dsh serve --listen unix:PATH`` socket.

    The other keywords configure the far executor exactly as the local
    constructor's do (docs/configuration.md); ``cwd`` and ``spill_dir`` are
    paths over there. A bad value raises InvalidArgumentError naming it; a
    transport that cannot be started or that ends raises TransportError.
    Use it as a context manager: leaving the block calls :meth:`close`.
    Executors still open at interpreter exit are closed then.

    ``reconnect`` (default True) matters where the server keeps a session
    after its connection ends (``dsh serve --stdio --linger SECONDS``, or
    ``dsh serve --listen unix:PATH --linger SECONDS``). When the transport
    then ends without ``close()``, the client starts it again (the same
    command, or the socket), retrying after 100 ms, doubling up to 2 s,
    for as long as the server keeps the session, and resumes it. Calls
    made meanwhile wait and are sent after the resume (``close()`` too,
    which disposes the session then). A call that was on its way keeps
    waiting for its answer when the server still owes it; one that only
    reads (``get``, ``list``, ``wait``, a read of output, …) is asked
    again; any other fails with :class:`AnswerLost`, since it may or may
    not have taken effect (a terminal session, whose id is chosen here, is
    looked up instead; ``close()`` disposes again). Each process's output
    is read by this client's
    own offsets (``read_from``), so ``read_output`` returns every byte
    once across a drop. When the session cannot be resumed in its linger
    time (the server went away, or refused the session), everything fails
    with TransportError as it does without a lingering server. With
    ``reconnect=False``, or a server that keeps no sessions, a dropped
    transport ends the executor at once.

    ``connect_timeout_ms`` (default 120 000) bounds the wait for the
    server's answer to the first message: a transport that is started but
    never answers (an ssh to a host that drops packets, a program that is
    not ``dsh serve``) is ended then (its process group killed) and
    TransportError raised, quoting its stderr. A reconnection's attempt
    that goes unanswered as long is ended and tried again. ``None`` (or
    ``math.inf``) waits for as long as it takes.
    """

    __slots__ = ("_remote", "_finalizer", "__weakref__")

    def __init__(
        self,
        command: Optional[Sequence[str]] = None,
        *,
        socket: Optional[_Path] = None,
        cwd: Optional[_Path] = None,
        timeout_ms: Optional[_Number] = None,
        max_timeout_ms: Optional[_Number] = None,
        max_output_bytes: Optional[_Number] = None,
        max_spill_bytes: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        spill_dir: Optional[_Path] = None,
        retain_settled: Optional[_Number] = None,
        sandbox_mode: Optional["_SandboxModeName"] = None,
        limits: Optional["_Limits"] = None,
        reconnect: bool = True,
        connect_timeout_ms: Optional[_Number] = _CONNECT_TIMEOUT_MS,
    ) -> None:
        # Bad input is refused before anything is started.
        config = _config_params(
            cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes,
            grace_ms, spill_dir, retain_settled, sandbox_mode, limits,
        )  # fmt: skip
        if not isinstance(reconnect, bool):
            raise TypeError(f"reconnect must be a bool, got {_type_name(reconnect)}")
        connect_s, connect_text = _connect_timeout(connect_timeout_ms)
        remote = _Remote(_transport(command, socket))
        remote.conn.connect_s, remote.conn.connect_text = connect_s, connect_text
        answered = False
        try:
            reply = remote.send(
                "initialize", {"protocol_version": PROTOCOL_VERSION, "config": config, "client": _CLIENT}
            )
            if not reply.wait(connect_s):
                raise _no_answer(remote.conn.transport, connect_text)
            answered = True
            info = reply.get()
            with _Shape("initialize"):
                if info["protocol_version"] != PROTOCOL_VERSION:
                    raise ValueError(f"it speaks protocol version {info['protocol_version']!r}")
                remote.config = _obj(info["config"])
                remote.sandbox_mode = _opt_str(info.get("sandbox_mode"))
                remote.host = _obj(info.get("host") or {})
                remote.server = _obj(info.get("server") or {})
            if reconnect and info.get("session") is not None:
                remote.keep_session(info["session"])
        except InvalidArgumentError as e:
            remote.closing = True
            remote.conn.shutdown()
            if e.field == "protocol_version":
                raise ProtocolError(f"the server does not speak protocol version {PROTOCOL_VERSION}: {e}") from None
            raise
        except BaseException:
            remote.closing = True
            if not answered:
                # Silent, or a Ctrl-C while it was: ended now, not after
                # shutdown's wait for a transport that may never end itself,
                # and not waited for long (a process that left its group
                # may hold its output open).
                remote.conn.transport.terminate()
                remote.conn.shutdown(patience_s=1.0)
            else:
                remote.conn.shutdown()
            raise
        self._remote = remote
        # Garbage: end the connection (the far side disposes); no waiting,
        # since a finalizer may run on any thread.
        self._finalizer = weakref.finalize(self, remote.conn.abandon)
        self._finalizer.atexit = False
        _open_executors.add(self)

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- facts

    @property
    def sandbox_mode(self) -> Optional["_SandboxModeName"]:
        """The default sandbox mode of the far executor, or None."""
        mode = self._remote.sandbox_mode
        if mode in ("read-only", "workspace-write", "danger-full-access"):
            return mode  # type: ignore[return-value]
        return None

    @property
    def disposed(self) -> bool:
        """True once ``close()`` has begun, or the connection is gone (the
        far side disposed the executor then)."""
        return self._remote.closing or self._remote.conn.failure is not None

    @property
    def server_version(self) -> Optional[str]:
        """The version of ``dsh`` serving this connection."""
        v = self._remote.server.get("version")
        return v if isinstance(v, str) else None

    @property
    def host_cwd(self) -> Optional[str]:
        """The server's working directory: the default workdir when no
        ``cwd`` is configured."""
        v = self._remote.host.get("cwd")
        return v if isinstance(v, str) else None

    def limits_support(self) -> Dict[str, str]:
        """``dsh_native.limits_support()`` of the far host."""
        facts = self._remote.host.get("facts") or {}
        return {str(k): str(v) for k, v in (facts.get("limits_support") or {}).items()}

    def metadata_unavailable(self) -> Optional[str]:
        """``dsh_native.metadata_unavailable()`` of the far host."""
        v = (self._remote.host.get("facts") or {}).get("metadata_unavailable")
        return v if isinstance(v, str) else None

    # -- configuration

    def reconfigure(
        self,
        *,
        cwd: Optional[_Path] = None,
        timeout_ms: Optional[_Number] = None,
        max_timeout_ms: Optional[_Number] = None,
        max_output_bytes: Optional[_Number] = None,
        max_spill_bytes: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        spill_dir: Optional[_Path] = None,
        retain_settled: Optional[_Number] = None,
        sandbox_mode: Optional["_SandboxModeName"] = None,
        limits: Optional["_Limits"] = None,
    ) -> None:
        """Replaces the configuration for everything resolved or started
        from now on, as the local ``reconfigure`` does."""
        config = _config_params(
            cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes,
            grace_ms, spill_dir, retain_settled, sandbox_mode, limits,
        )  # fmt: skip
        r = self._remote
        r.check_open()
        answer = r.call("reconfigure", {"config": config})
        with _Shape("reconfigure"):
            r.config = _obj(answer["config"])
            r.sandbox_mode = _opt_str(r.config.get("sandbox_mode"))

    # -- commands

    def resolve(
        self,
        command: str,
        *,
        workdir: Optional[_FsPath] = None,
        timeout_ms: Optional[_Number] = None,
        stdout_max_bytes: Optional[_Number] = None,
        stdin: Union[str, bytes, int, None] = None,
        env: Optional[Mapping[str, str]] = None,
        dsh_env: Optional[Mapping[str, str]] = None,
        owner: Optional[str] = None,
        sandbox_policy: Union[SandboxPolicy, _NativeSandboxPolicy, Mapping[str, Optional[_FsPath]], None] = None,
        on_expiry: Optional[Literal["kill", "background"]] = None,
        limits: Optional["_Limits"] = None,
    ) -> Spec:
        """Request → spec, by the far executor (its defaults, its cwd);
        the keywords are the local ``resolve``'s. Raises
        InvalidArgumentError naming the field."""
        request: Dict[str, Any] = {"command": _required_str(command, "request.command", "")}
        pipe = _is_pipe(stdin)
        if pipe:
            request["stdin_pipe"] = True
        elif stdin is not None:
            if isinstance(stdin, str):
                request["stdin"] = _required_str(stdin, "request.stdin", "")
            elif isinstance(stdin, bytes):
                request["stdin_base64"] = base64.b64encode(stdin).decode("ascii")
            else:
                raise _invalid("request.stdin", "must be str, bytes or PIPE")
        optional: Dict[str, Any] = {
            "workdir": _path(workdir, "request.workdir", ""),
            "timeout_ms": _number(timeout_ms, "request.timeout_ms"),
            "stdout_max_bytes": _number(stdout_max_bytes, "request.stdout_max_bytes"),
        }
        if on_expiry is not None:
            name = _utf8(on_expiry, "request.on_expiry", "")
            if name is None:
                raise _invalid("request.on_expiry", "must be 'kill' or 'background'")
            optional["on_expiry"] = name
        optional["env"] = _string_map(env, "request.env")
        optional["dsh_env"] = _string_map(dsh_env, "request.dsh_env")
        optional["owner"] = _optional_str(owner, "request.owner")
        optional["sandbox_policy"] = _policy(sandbox_policy)
        optional["limits"] = _limits(limits, "request")
        request.update({k: v for k, v in optional.items() if v is not None})
        r = self._remote
        r.check_open()
        answer = r.call("resolve", {"request": request}, oversize_field="request.stdin")
        with _Shape("resolve"):
            return Spec(_obj(answer["spec"]))

    def _run_params(self, spec: Spec, cancel: Optional[CancelToken]) -> Tuple[Dict[str, Any], str]:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a Spec made by a remote Executor's resolve(), got {_type_name(spec)}")
        r = self._remote
        r.check_open()
        if cancel is not None and cancel.cancelled:
            raise AlreadyCancelledError(_ALREADY_CANCELLED)
        run_id = f"run-{next(r.run_ids)}"
        return {"spec": spec._wire, "run_id": run_id}, run_id

    def run(
        self,
        spec: Spec,
        cancel: Optional[CancelToken] = None,
        *,
        on_output: Optional[Callable[[OutputChunk], object]] = None,
    ) -> RunResult:
        """Runs ``spec`` in the foreground on the far side and returns its
        RunResult. ``cancel``: a CancelToken whose ``cancel()`` aborts it.
        Ctrl-C aborts the command, waits until it is gone, and re-raises.

        ``on_output``: called on this thread with each :class:`OutputChunk`
        of the output as it arrives, in order, every one before ``run``
        returns (the result holds the output as always). A callback slower
        than the command holds it back, as a slow terminal does: once 8 MiB
        wait for it, the connection is read no further until it catches up
        (other calls' answers wait too), and the server stops reading the
        command's output. One that takes nothing for 2 s meanwhile (it
        waits for something itself) is not waited for: chunks are left
        out, as they are while the connection is down; a chunk whose
        ``offset`` is past the end of the one before shows the gap. An
        exception it raises cancels the run, no chunk is handed over after
        it, and ``run`` raises it once the run's answer came (a process the
        run was handed over to at its timeout meanwhile is killed)."""
        r = self._remote
        r.refuse_blocking()
        params, run_id = self._run_params(spec, cancel)
        stream = r.open_stream(params, run_id, on_output, None)
        reply = _Reply()

        def answered(value: Any, error: Optional[BaseException]) -> None:
            reply.settle(value, error)
            if stream is not None:
                r.close_stream(run_id, stream)

        def cancel_run() -> None:
            r.cancel_run(run_id)

        r.send_run(params, run_id, stream, answered)
        try:
            self._await_run(reply, stream, cancel, cancel_run)
        except (KeyboardInterrupt, SystemExit):
            if stream is not None:
                stream.stop()  # nobody takes chunks any more: the reader must not wait for it
            cancel_run()
            try:
                reply.wait(None)
            except BaseException:
                pass
            raise
        if stream is not None and stream.error is not None:
            try:
                with _Shape("run"):
                    handed_over: Optional[RunResult] = _run_result(reply.get())
            except BaseException:
                handed_over = None
            r.kill_handed_over(handed_over)
            raise stream.error
        value = reply.get()
        with _Shape("run"):
            return _run_result(value)

    @staticmethod
    def _await_run(
        reply: _Reply, stream: Optional[_RunStream], cancel: Optional[CancelToken], cancel_run: Callable[[], None]
    ) -> None:
        """Until the run's answer came and, streamed, every chunk before it
        was handed over; a CancelToken's ``cancel()`` is passed on."""
        poll = _CANCEL_POLL if cancel is not None else _SIGNAL_POLL
        while True:
            if stream is not None:
                if stream.hand_over(poll):
                    return
            elif reply.wait(None if cancel is None else poll):
                return
            if cancel is not None and cancel.cancelled:
                cancel_run()
                cancel = None

    async def run_async(
        self,
        spec: Spec,
        cancel: Optional[CancelToken] = None,
        *,
        on_output: Optional[Callable[[OutputChunk], object]] = None,
    ) -> RunResult:
        """Runs ``spec`` without blocking the event loop. Cancelling the
        awaiting task aborts the command (as ``cancel`` does), waits until
        it is gone, and re-raises ``asyncio.CancelledError``.

        ``on_output``: as for :meth:`run`, called on the event loop's
        thread; an exception it raises cancels the run and is raised here
        once the run's answer came."""
        r = self._remote
        params, run_id = self._run_params(spec, cancel)
        loop = asyncio.get_running_loop()
        done: "asyncio.Future[RunResult]" = loop.create_future()
        stream = r.open_stream(params, run_id, on_output, loop)

        def answered(value: Any, error: Optional[BaseException]) -> None:
            result: Optional[RunResult] = None
            if error is None:
                try:
                    with _Shape("run"):
                        result = _run_result(value)
                except ProtocolError as e:
                    error = e
            if stream is None:
                _deliver(loop, done, result, error)
                return
            r.close_stream(run_id, stream)
            streamed = stream

            def settle() -> None:
                # On the loop, after every chunk handed to it before: the
                # callback's exception, if it raised one, is the outcome.
                if streamed.error is not None:
                    r.kill_handed_over(result)
                resolve_future(done, result, streamed.error if streamed.error is not None else error)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed: nobody is waiting
                pass

        r.send_run(params, run_id, stream, answered)
        watcher: Optional["asyncio.Task[None]"] = None
        if cancel is not None:
            watcher = loop.create_task(self._watch_token(cancel, run_id, done))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if stream is not None:
                stream.stop()
            r.cancel_run(run_id)
            try:
                await done
            except BaseException:
                pass
            raise
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _watch_token(self, cancel: CancelToken, run_id: str, done: "asyncio.Future[RunResult]") -> None:
        # A CancelToken has no callback: it is looked at until the run ends.
        while not done.done():
            if cancel.cancelled:
                self._remote.cancel_run(run_id)
                return
            await asyncio.sleep(_CANCEL_POLL)

    def start(self, spec: Spec) -> Process:
        """Starts ``spec`` in the background on the far side; returns its
        Process at once."""
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a Spec made by a remote Executor's resolve(), got {_type_name(spec)}")
        r = self._remote
        r.check_open()
        answer = r.call("start", {"spec": spec._wire}, oversize_field="spec.stdin")
        return r.process(answer.get("process") if isinstance(answer, dict) else None, "start")

    # -- terminal sessions

    def spawn_terminal(
        self,
        argv: Optional[Sequence[str]] = None,
        *,
        command: Optional[str] = None,
        cwd: Optional[_FsPath] = None,
        env: Optional[Mapping[str, str]] = None,
        dsh_env: Optional[Mapping[str, str]] = None,
        rows: Optional[_Number] = None,
        cols: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        sandbox_policy: Union[SandboxPolicy, _NativeSandboxPolicy, Mapping[str, Optional[_FsPath]], None] = None,
    ) -> Terminal:
        """Starts a terminal session on the far side (docs/terminals.md):
        ``argv`` (a program and its arguments, looked up on the far PATH)
        or ``command`` (a line for bash), exactly one; the keywords are the
        local ``spawn_terminal``'s, ``cwd`` a path over there. Returns once
        the program has started. Raises InvalidArgumentError naming the
        field (``request.rows``), SpawnError when it cannot start."""
        if argv is not None and command is not None:
            raise _invalid("request.argv", "and command cannot both be given")
        request: Dict[str, Any] = {}
        if argv is not None:
            request["argv"] = _argv_list(argv, "request.argv")
        elif command is not None:
            request["command"] = _required_str(command, "request.command", "")
        else:
            raise _invalid("request.argv", "is required (or command, a line for bash)")
        optional: Dict[str, Any] = {
            "cwd": _path(cwd, "request.cwd", ""),
            "env": _string_map(env, "request.env"),
            "dsh_env": _string_map(dsh_env, "request.dsh_env"),
            "rows": _number(rows, "request.rows"),
            "cols": _number(cols, "request.cols"),
            "grace_ms": _number(grace_ms, "request.grace_ms"),
            "sandbox_policy": _policy(sandbox_policy),
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        r = self._remote
        r.check_open()
        r.refuse_blocking()
        return r.spawn_terminal(request)

    # -- the registry

    def get(self, id: str) -> Optional[Process]:
        """The process registered as ``id``, or None."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            state = kept.get(id)
            return None if state is None else Process(r, state)
        answer = r.call("get", {"id": id})
        process = answer.get("process") if isinstance(answer, dict) else None
        return None if process is None else r.process(process, "get")

    def owner_of(self, id: str) -> Optional[str]:
        """The ``owner`` stored at start; NotFoundError for an unknown id."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return Process(r, self._kept(kept, id)).owner
        answer = r.call("owner_of", {"id": id})
        with _Shape("owner_of"):
            return _opt_str(answer["owner"])

    def list(self) -> List[Process]:
        """Every registered background process, in start order."""
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return [Process(r, state) for state in kept.values()]
        answer = r.call("list", {})
        with _Shape("list"):
            processes = answer["processes"]
            if not isinstance(processes, list):
                raise TypeError("processes is not a list")
        return [r.process(p, "list") for p in processes]

    def read_output(self, id: str) -> ProcessRead:
        """``Process.read_output`` of the process registered as ``id``."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return self._kept(kept, id).take_final_read()
        return r.read_output(id)

    def kill(self, id: str) -> bool:
        """``Process.kill`` of the process registered as ``id``."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            self._kept(kept, id)
            return False
        answer = r.call("kill", {"id": id})
        with _Shape("kill"):
            return _bool(answer["began"])

    def forget(self, id: str) -> None:
        """Forgets a settled process (and its output and spill files);
        StillRunningError while it runs, NotFoundError for an unknown id."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            self._kept(kept, id)
            del kept[id]
            return
        r.call("forget", {"id": id})
        r.drop_cursor(id)

    @staticmethod
    def _kept(kept: Dict[str, _ProcState], id: str) -> _ProcState:
        state = kept.get(id)
        if state is None:
            raise _not_found(id)
        return state

    def on_task_done(self, callback: Callable[[Process], object]) -> Unsubscribe:
        """Calls ``callback(process)`` once for each background process that
        settles from now on, from a listener thread of this executor; an
        exception it raises goes to ``sys.unraisablehook``. Returns a
        callable that unsubscribes."""
        if not callable(callback):
            raise TypeError(f"on_task_done: callback must be callable, got {_type_name(callback)}")
        r = self._remote
        return Unsubscribe(r, r.subscribe(callback))

    # -- the end

    def close(self) -> None:
        """Disposes the far executor (kills everything it runs and waits),
        delivers the task-done notifications already received, then ends
        the transport. Idempotent. Afterwards ``get``, ``list``,
        ``read_output`` and the process handles answer from what the
        registry held at the close; ``resolve``, ``run`` and ``start`` raise
        DisposedError. A connection already gone is not an error here."""
        self._remote.close()
        self._finalizer.detach()

    def __repr__(self) -> str:
        c = self._remote.config
        return (
            f"Executor(transport={self._remote.conn.transport.description!r}, timeout_ms={c.get('timeout_ms')}, "
            f"max_timeout_ms={c.get('max_timeout_ms')}, max_output_bytes={c.get('max_output_bytes')}, "
            f"grace_ms={c.get('grace_ms')}, disposed={_py_bool(self.disposed)})"
        )
