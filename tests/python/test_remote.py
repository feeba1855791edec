"""dsh_native.remote.Executor: what is specific to driving `dsh serve` over a
transport. The shared contract runs in test_contract.py against every
transport; here: the errors are the local ones, a transport that goes away
fails what waits on it and leaves nothing running, back-pressure crosses the
connection, a run's output streamed as it comes, the unix socket face, and a
server that breaks the protocol. test_remote_resume.py: a server that keeps
sessions, and a client that reconnects."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union, cast

import pytest

import dsh_native
from dsh_native import (
    PIPE,
    AlreadyCancelledError,
    BlockingCallError,
    CancelToken,
    DisposedError,
    DshError,
    ForkedChildError,
    InvalidArgumentError,
    LimitUnavailableError,
    NotFoundError,
    SandboxUnavailableError,
    SpawnError,
    StdinClosedError,
    StillRunningError,
)
from dsh_native.remote import Executor, OutputChunk, Process, ProtocolError, RunResult, Spec, TransportError
from dsh_native.remote import Foreground as RemoteForeground
from dsh_native.remote import Terminal as RemoteTerminal

from conftest import alive, comm, eventually, need_dsh_bin, read_until
from sshd_server import Sshd

# Everything that could hang runs under this bound: a hang fails the test.
WATCHDOG_S = 120


@pytest.fixture(autouse=True)
def watchdog() -> Iterator[None]:
    """Raises in the main thread if a test runs past WATCHDOG_S (the client's
    blocking waits wake up regularly, so the exception gets through)."""

    def fire(signum: int, frame: Optional[FrameType]) -> None:
        raise TimeoutError(f"the test ran for more than {WATCHDOG_S} s: a hang")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(WATCHDOG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def dsh() -> str:
    return need_dsh_bin()


@pytest.fixture
def stdio(dsh: str) -> List[str]:
    return [dsh, "serve", "--stdio"]


@pytest.fixture(params=["stdio", "ssh"])
def serve(request: pytest.FixtureRequest, dsh: str) -> List[str]:
    """The transport command of `dsh serve --stdio`: a child, or across ssh."""
    if request.param == "stdio":
        return [dsh, "serve", "--stdio"]
    sshd: Sshd = request.getfixturevalue("sshd")
    return sshd.serve_command(dsh)


@pytest.fixture
def rex(stdio: List[str]) -> Iterator[Executor]:
    with Executor(stdio, grace_ms=300) as executor:
        yield executor


@pytest.fixture
def tmp() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="dsh-py-remote-") as d:
        yield d


def read_pid(path: str) -> int:
    """The pid a command wrote to `path`, once it has. Read once: a command
    that writes it again (a new transport) empties it for a moment."""
    pids: List[int] = []

    def written() -> bool:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            return False
        if text.isdigit():
            pids.append(int(text))
        return bool(pids)

    assert eventually(written), f"no pid in {path}"
    return pids[0]


def in_thread(fn: Callable[[], Any]) -> Tuple[threading.Thread, Dict[str, Any]]:
    """Runs `fn` in a daemon thread; the dict gets its 'value' or 'error'
    and the time it ended ('at')."""
    out: Dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e
        out["at"] = time.monotonic()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


def pidfile_wrapper(pidfile: str, command: List[str]) -> List[str]:
    """`command`, exec'd by a shell that first writes its pid to `pidfile`."""
    return ["sh", "-c", f'echo $$ > {shlex.quote(pidfile)}; exec "$@"', "sh", *command]


# the same errors as the local executor ---------------------------------------------


def error_facts(e: BaseException) -> Tuple[Any, ...]:
    """What a caller of either executor can look at."""
    return (
        type(e),
        str(e),
        getattr(e, "field", None),
        getattr(e, "errno", None),
        getattr(e, "id", None),
        getattr(e, "reason", None),
        getattr(e, "limit", None),
    )


def failures(ex: Any, make: Callable[..., Any], tmp: str) -> List[Tuple[Any, ...]]:
    """Runs one fixed list of refused calls on `ex`; returns each error's facts."""
    out: List[Tuple[Any, ...]] = []

    def expect(call: Callable[[], Any]) -> None:
        try:
            call()
        except DshError as e:
            out.append(error_facts(e))
        else:
            out.append(("no error",))

    r = ex.resolve
    bad_requests: List[Dict[str, Any]] = [
        {"timeout_ms": 0},
        {"timeout_ms": float("nan")},
        {"timeout_ms": True},
        {"timeout_ms": "5"},
        {"stdout_max_bytes": 2.5},
        {"workdir": 5},
        {"workdir": b""},
        {"workdir": "/tmp/\0"},
        {"env": {"A": 1}},
        {"env": {"A": "x\0"}},
        {"env": {"": "v"}},
        {"env": ["A"]},
        {"dsh_env": {"FOO": "v"}},
        {"stdin": 5},
        {"stdin": "\ud800"},
        {"owner": 5},
        {"on_expiry": "later"},
        {"on_expiry": 5},
        {"limits": {"bogus": 1}},
        {"limits": {"memory_bytes": -1}},
        {"limits": {"memory_bytes": float("inf")}},
        {"limits": [1]},
        {"sandbox_policy": {"mode": "nope"}},
        {"sandbox_policy": {}},
        {"sandbox_policy": 5},
        {"sandbox_policy": {"mode": "read-only", "network": "sometimes"}},
        {"sandbox_policy": {"mode": "read-only", "workspace_root": 5}},
    ]
    for kwargs in bad_requests:
        expect(lambda: r("true", **kwargs))
    expect(lambda: r(5))
    expect(lambda: r("a\0b"))
    expect(lambda: r(b"true"))
    expect(lambda: ex.run(r("true", workdir="/nonexistent/dsh-py-remote")))
    expect(lambda: ex.run(r("true", env={"PATH": "/nonexistent"})))
    expect(lambda: ex.run(r("true", sandbox_policy={"mode": "workspace-write", "workspace_root": "/nonexistent/r"})))
    expect(lambda: ex.run(r("true", limits={"open_files": 1 << 40})))
    token = CancelToken()
    token.cancel()
    expect(lambda: ex.run(r("true"), cancel=token))
    for call in (ex.owner_of, ex.read_output, ex.kill, ex.forget):
        expect(lambda: call("bash-99"))
    sleeper = ex.start(r("sleep 30"))
    expect(lambda: ex.forget(sleeper.id))
    expect(lambda: sleeper.write_stdin("x"))
    piped = ex.start(r(f"cat > {tmp}/piped-{type(ex).__module__}", stdin=PIPE))
    piped.close_stdin()
    expect(lambda: piped.write_stdin("x"))
    piped.wait(30)
    expect(lambda: piped.write_stdin("x"))
    exited = ex.start(r("true", stdin=PIPE))
    exited.wait(30)
    expect(lambda: exited.write_stdin("x"))
    expect(lambda: ex.reconfigure(grace_ms=-1))
    # (The core makes the directory even though it refuses the change.)
    expect(lambda: ex.reconfigure(spill_dir=f"{tmp}/elsewhere"))
    expect(lambda: make(grace_ms="100"))
    expect(lambda: make(timeout_ms=10_000, max_timeout_ms=5_000))
    expect(lambda: make(sandbox_mode="yolo"))
    expect(lambda: make(limits={"processes": 0}))
    sleeper.kill()
    spec = r("true")
    ex.close()
    expect(lambda: ex.run(spec))
    expect(lambda: ex.start(spec))
    expect(lambda: ex.reconfigure(grace_ms=100))
    return out


def test_errors_have_the_local_classes_attributes_and_messages(stdio: List[str], tmp: str) -> None:
    def make_remote(**config: Any) -> Executor:
        e = Executor(stdio, **config)
        e.close()
        return e

    def make_local(**config: Any) -> dsh_native.Executor:
        e = dsh_native.Executor(**config)
        e.close()
        return e

    local = failures(dsh_native.Executor(grace_ms=300), make_local, tmp)
    remote = failures(Executor(stdio, grace_ms=300), make_remote, tmp)
    assert len(local) == len(remote)
    for i, (want, got) in enumerate(zip(local, remote)):
        assert got == want, f"call {i}"
    # Every class the list was meant to reach, reached.
    kinds = {facts[0] for facts in local}
    assert {
        InvalidArgumentError, SpawnError, SandboxUnavailableError, AlreadyCancelledError,
        NotFoundError, StillRunningError, StdinClosedError, DisposedError,
    } <= kinds  # fmt: skip
    reasons = {facts[5] for facts in local if facts[0] is StdinClosedError}
    assert reasons == {"not-piped", "closed", "exited"}


def test_a_limit_the_far_host_cannot_enforce_names_it(rex: Executor) -> None:
    # Where every limit is enforceable this is the kernel's refusal instead;
    # either way the class and the attribute are the local ones.
    support = rex.limits_support()
    assert support == dsh_native.limits_support()  # the same host here
    unsupported = [k for k, v in support.items() if v == "unsupported"]
    if not unsupported:
        pytest.skip("every limit is enforceable on this host")
    key = {"memory": "memory_bytes", "processes": "processes"}.get(unsupported[0], unsupported[0])
    with pytest.raises(LimitUnavailableError) as info:
        rex.run(rex.resolve("true", limits=cast(Any, {key: 1 << 20})))
    assert info.value.limit == unsupported[0]


def test_a_path_that_is_not_utf8_is_refused_naming_its_field(rex: Executor) -> None:
    for workdir in (b"/tmp/\xff", os.fsdecode(b"/tmp/\xff")):
        with pytest.raises(InvalidArgumentError) as info:
            rex.resolve("true", workdir=workdir)
        assert info.value.field == "request.workdir" and "not UTF-8" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        rex.resolve("true", sandbox_policy={"mode": "read-only", "workspace_root": b"/\xfe"})
    assert info.value.field == "request.sandbox_policy" and "workspace_root is not UTF-8" in str(info.value)


def test_a_message_past_the_protocol_limit_is_refused_naming_the_field(rex: Executor) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        rex.resolve("wc -c", stdin=b"x" * (40 << 20))
    assert info.value.field == "request.stdin" and "stdin=PIPE" in str(info.value)
    # Nothing was sent: the connection still answers.
    assert rex.run(rex.resolve("echo ok")).stdout.text == "ok\n"


# the transport, the constructor ------------------------------------------------------


def test_exactly_one_transport_of_the_right_type(stdio: List[str], tmp: str) -> None:
    with pytest.raises(TypeError, match="exactly one"):
        Executor()
    with pytest.raises(TypeError, match="exactly one"):
        Executor(stdio, socket=os.path.join(tmp, "s"))
    with pytest.raises(TypeError, match="list of str"):
        Executor("ssh host dsh serve --stdio")  # a str is a Sequence[str] to a type checker
    with pytest.raises(TypeError, match="item 1"):
        Executor(["ssh", 5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="empty"):
        Executor([])
    with pytest.raises(TypeError):
        Executor(stdio, timeout=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="reconnect must be a bool"):
        Executor(["/nonexistent/never-started"], reconnect="yes")  # type: ignore[arg-type]
    # A bad configuration is refused before any transport is started.
    with pytest.raises(InvalidArgumentError) as info:
        Executor(["/nonexistent/never-started"], grace_ms=True)
    assert info.value.field == "config.grace_ms"


def test_a_transport_that_cannot_start_or_exits_at_once_is_named(tmp: str) -> None:
    with pytest.raises(TransportError) as info:
        Executor(["/nonexistent/dsh-transport", "serve"])
    assert "/nonexistent/dsh-transport" in str(info.value) and isinstance(info.value, ConnectionError)
    with pytest.raises(TransportError) as info:
        Executor(["sh", "-c", "echo 'ssh: connect to host nowhere port 22: Connection refused' >&2; exit 255"])
    message = str(info.value)
    assert "exited with status 255" in message and "Connection refused" in message
    assert info.value.transport is not None and info.value.transport.startswith("sh -c")
    with pytest.raises(TransportError) as info:
        Executor(socket=os.path.join(tmp, "nobody-listens"))
    assert "nobody-listens" in str(info.value)


def test_a_transport_that_never_answers_is_ended_at_the_connect_timeout(tmp: str) -> None:
    # Started, holding its pipes, deaf to the end of its input: as an ssh
    # to a host that drops every packet.
    pidfile = os.path.join(tmp, "silent.pid")
    silent = ["sh", "-c", f"echo $$ > {shlex.quote(pidfile)}; echo 'still connecting' >&2; exec sleep 600"]
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        Executor(silent, connect_timeout_ms=400)
    took = time.monotonic() - start
    message = str(info.value)
    assert "did not answer initialize within 400 ms (connect_timeout_ms)" in message, message
    assert "still connecting" in message, "the transport's stderr is quoted"
    assert info.value.transport is not None and info.value.transport.startswith("sh -c")
    # Ended at the timeout, not after the wait for a transport to end itself.
    assert 0.4 <= took < 8, took
    assert not alive(read_pid(pidfile)), "the silent transport was left running"

    # One that left a process of its own session holding its output (which
    # the transport's group kill cannot reach): still ended in bounded time.
    escaped_pidfile = os.path.join(tmp, "escaped.pid")
    escaping = ["sh", "-c", f"setsid sh -c 'echo $$ > {escaped_pidfile}; exec sleep 600' & exec sleep 600"]
    start = time.monotonic()
    try:
        with pytest.raises(TransportError, match="did not answer initialize within 300 ms"):
            Executor(escaping, connect_timeout_ms=300)
        assert time.monotonic() - start < 10
    finally:
        os.kill(read_pid(escaped_pidfile), signal.SIGKILL)

    # The same from a unix socket whose server accepts and never answers.
    import socket as socket_module

    path = os.path.join(tmp, "deaf.sock")
    server = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        with pytest.raises(TransportError, match="did not answer initialize within 300 ms"):
            Executor(socket=path, connect_timeout_ms=300)
    finally:
        server.close()

    # And one whose server takes no connection at all (its queue full): at
    # once, as the far side's EAGAIN says, whatever the timeout.
    full = os.path.join(tmp, "full.sock")
    server = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    server.bind(full)
    server.listen(0)
    queued = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    try:
        queued.connect(full)  # the one place in the queue
        for limit in (300, None):
            start = time.monotonic()
            with pytest.raises(TransportError, match="full.sock: .*Resource temporarily unavailable"):
                Executor(socket=full, connect_timeout_ms=limit)
            assert time.monotonic() - start < 5
    finally:
        queued.close()
        server.close()


def test_the_connect_timeout_is_checked_before_anything_starts(stdio: List[str], tmp: str) -> None:
    marker = os.path.join(tmp, "started")
    never = ["sh", "-c", f"touch {shlex.quote(marker)}"]
    for bad in (0, -1, float("nan"), "1000", True, [1]):
        with pytest.raises(InvalidArgumentError) as info:
            Executor(never, connect_timeout_ms=bad)  # type: ignore[arg-type]
        assert info.value.field == "connect_timeout_ms" and "connect_timeout_ms" in str(info.value)
    assert not os.path.exists(marker), "a transport was started for a refused value"
    # No limit, past any float, a fraction and other kinds of number connect as usual.
    from decimal import Decimal
    from fractions import Fraction

    for fine in (None, float("inf"), 10**400, 20_000.5, Decimal("20000"), Fraction(40_001, 2)):
        with Executor(stdio, connect_timeout_ms=cast(Any, fine)) as ex:
            assert ex.run(ex.resolve("echo ok")).stdout.text == "ok\n"
    # However long, a socket's connect fails as one, never with the number.
    for long in (1e13, 1e300):
        with pytest.raises(TransportError, match="nobody-listens"):
            Executor(socket=os.path.join(tmp, "nobody-listens"), connect_timeout_ms=long)


def test_ssh_that_cannot_log_in_says_why(sshd: Sshd, dsh: str) -> None:
    command = sshd.serve_command(dsh)
    command[command.index("-i") + 1] = "/dev/null"  # no usable key
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        Executor(command)
    assert time.monotonic() - start < 30
    assert "status 255" in str(info.value) and "Permission denied" in str(info.value)


def test_spawn_is_not_offered_and_terminals_are() -> None:
    # spawn is not in the protocol: absent, not faked.
    for name in ("spawn", "_run_with_callback"):
        assert not hasattr(Executor, name)
    # A terminal session has every member of the local one.
    assert hasattr(Executor, "spawn_terminal")
    foreground = RemoteForeground(process_group_id=1, input_waiting=False)
    for local, remote in ((dsh_native.Terminal, RemoteTerminal), (dsh_native.Foreground, foreground)):
        members = {n for n in dir(local) if not n.startswith("_") or n in ("__aiter__", "__anext__")}
        assert members <= set(dir(remote)), members - set(dir(remote))
    assert repr(foreground) == "Foreground(process_group_id=1, input_waiting=False)"


def test_the_far_host_is_described(rex: Executor) -> None:
    assert rex.server_version == dsh_native.__version__
    assert rex.host_cwd == os.getcwd()  # a child inherits ours
    assert rex.metadata_unavailable() == dsh_native.metadata_unavailable()
    assert "transport=" in repr(rex) and "disposed=False" in repr(rex)


def test_commands_get_the_server_environment_scrubbed(dsh: str) -> None:
    command = ["env", "MY_API_KEY=leak1", "DSH_STALE=leak2", "db_password=leak3", "PLAIN_SETTING=kept",
               dsh, "serve", "--stdio"]  # fmt: skip
    with Executor(command) as ex:
        out = ex.run(ex.resolve("env", env={"PAGER": "less"}, dsh_env={"DSH_X": "x"})).stdout.text
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert "leak" not in out
    assert (env["PLAIN_SETTING"], env["PAGER"], env["DSH_X"], env["NO_COLOR"]) == ("kept", "less", "x", "1")


# listeners ----------------------------------------------------------------------------


def test_task_done_listeners_hear_every_settle_with_final_facts(rex: Executor) -> None:
    heard: List[Tuple[str, str, Optional[int], bool]] = []
    refused: List[BaseException] = []
    threads = set()

    def listener(p: Process) -> None:
        threads.add(threading.current_thread().name)
        heard.append((p.id, p.status, p.exit_code, p.done))
        try:
            p.wait()
        except BlockingCallError as e:  # as locally: a listener must not block
            refused.append(e)

    unsubscribe = rex.on_task_done(listener)
    procs = [rex.start(rex.resolve(f"exit {i}")) for i in range(3)]
    for p in procs:
        p.wait(30)
    assert eventually(lambda: len(heard) == 3 and len(refused) == 3)
    assert sorted(heard) == [(f"bash-{i + 1}", "completed", i, True) for i in range(3)]
    assert threading.current_thread().name not in threads
    assert unsubscribe() is True and unsubscribe() is False
    rex.start(rex.resolve("true")).wait(30)
    rex.close()
    assert len(heard) == 3
    with pytest.raises(TypeError, match="callable"):
        rex.on_task_done(5)  # type: ignore[arg-type]


def test_close_from_a_listener_is_refused(rex: Executor) -> None:
    seen: List[BaseException] = []

    def listener(p: Process) -> None:
        try:
            rex.close()
        except BaseException as e:
            seen.append(e)

    rex.on_task_done(listener)
    rex.start(rex.resolve("true")).wait(30)
    assert eventually(lambda: len(seen) == 1)
    assert isinstance(seen[0], BlockingCallError)
    assert not rex.disposed


# stdin ----------------------------------------------------------------------------------


def test_write_stdin_is_held_until_the_command_reads(rex: Executor, tmp: str) -> None:
    go = os.path.join(tmp, "go")
    p = rex.start(rex.resolve(f"while [ ! -e {go} ]; do sleep 0.01; done; wc -c", stdin=PIPE))
    assert p.has_stdin_pipe
    data = b"y" * (1 << 20)
    t, out = in_thread(lambda: p.write_stdin(data))
    t.join(1.0)
    assert t.is_alive(), "1 MiB was taken by a command that does not read (no back-pressure)"
    open(go, "w").close()
    t.join(60)
    assert not t.is_alive() and "error" not in out, out
    assert p.close_stdin() is True and p.close_stdin() is False
    p.wait(30)
    assert p.read_output().delta.strip() == str(len(data))


def test_a_write_larger_than_a_message_goes_in_pieces_in_order(rex: Executor) -> None:
    # 40 MiB is past what one message holds (48 MiB of base64 text).
    data = bytes(range(256)) * (160 << 12)
    p = rex.start(rex.resolve("sha256sum", stdin=PIPE))
    p.write_stdin(data[: 1 << 20])
    p.write_stdin(data[1 << 20 :])
    p.close_stdin()
    p.wait(60)
    import hashlib

    assert p.read_output().delta.split()[0] == hashlib.sha256(data).hexdigest()


def test_async_writes_waits_and_runs(rex: Executor, tmp: str) -> None:
    async def main() -> None:
        p = rex.start(rex.resolve("cat", stdin=PIPE))
        await asyncio.gather(p.write_stdin_async("one "), p.write_stdin_async(b"two"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.wait_async(), 0.1)
        for _ in range(20):  # polling leaves nothing behind
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(p.wait_async(), 0.001)
        p.close_stdin()
        await asyncio.wait_for(p.wait_async(), 30)
        assert p.read_output().delta == "one two"
        with pytest.raises(StdinClosedError) as info:
            await p.write_stdin_async("late")
        assert info.value.reason == "closed"
        r = await rex.run_async(rex.resolve("echo async"))
        assert r.stdout.text == "async\n"
        token = CancelToken()
        mark = os.path.join(tmp, "started")
        task = asyncio.ensure_future(rex.run_async(rex.resolve(f"touch {mark}; sleep 30"), cancel=token))
        while not os.path.exists(mark):
            await asyncio.sleep(0.01)
        token.cancel()
        r = await asyncio.wait_for(task, 30)
        assert r.aborted and r.signal == "SIGTERM"

    asyncio.run(main())


def test_cancelling_run_async_aborts_the_far_command(rex: Executor, tmp: str) -> None:
    pidfile = os.path.join(tmp, "pid")

    async def main() -> int:
        task = asyncio.ensure_future(rex.run_async(rex.resolve(f"echo $$ > {pidfile}; exec sleep 300")))
        while not os.path.exists(pidfile) or not open(pidfile).read().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return read_pid(pidfile)

    pid = asyncio.run(main())
    assert not alive(pid), "the cancelled run's command outlived the cancellation"


def test_ctrl_c_aborts_a_remote_run_and_raises(rex: Executor, tmp: str) -> None:
    pidfile = os.path.join(tmp, "pid")
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main

    def interrupt() -> None:
        read_pid(pidfile)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        rex.run(rex.resolve(f"echo $$ > {pidfile}; exec sleep 300"))
    assert not alive(read_pid(pidfile))
    assert rex.run(rex.resolve("echo still")).stdout.text == "still\n"


def test_many_threads_share_one_connection(rex: Executor) -> None:
    def work(i: int) -> List[str]:
        out = []
        for j in range(10):
            out.append(rex.run(rex.resolve(f"echo {i}-{j}")).stdout.text)
            p = rex.start(rex.resolve(f"echo bg{i}-{j}"))
            p.wait(30)
            out.append(p.read_output().delta)
        return out

    workers = [in_thread(lambda i=i: work(i)) for i in range(8)]  # type: ignore[misc]
    for i, (t, out) in enumerate(workers):
        t.join(90)
        assert not t.is_alive()
        assert out.get("value") == [x for j in range(10) for x in (f"{i}-{j}\n", f"bg{i}-{j}\n")], out
    assert len(rex.list()) == 80


# streamed runs ------------------------------------------------------------------------------


def run_streamed(
    ex: Executor, spec: Spec, how: str, on_output: Callable[[OutputChunk], object], cancel: Optional[CancelToken] = None
) -> RunResult:
    """``ex.run(spec, cancel, on_output=...)``, or its asyncio face."""
    if how == "sync":
        return ex.run(spec, cancel, on_output=on_output)

    async def main() -> RunResult:
        return await ex.run_async(spec, cancel, on_output=on_output)

    return asyncio.run(main())


@pytest.mark.parametrize("how", ["sync", "async"])
def test_on_output_gets_every_byte_in_order_as_the_command_wrote_it(rex: Executor, tmp: str, how: str) -> None:
    # More than 1 MiB, every byte value, and bytes that are not UTF-8 (a
    # character cut in two among them).
    payload = bytes(range(256)) * 4096 + "\u00e9".encode()[:1] + os.urandom(256 << 10)
    errors = b"to stderr \xff\n" * 2000
    with open(os.path.join(tmp, "out"), "wb") as f:
        f.write(payload)
    with open(os.path.join(tmp, "err"), "wb") as f:
        f.write(errors)
    chunks: List[OutputChunk] = []
    threads = set()

    def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)
        threads.add(threading.get_ident())

    spec = rex.resolve(f"cat {tmp}/out; cat {tmp}/err >&2; cat {tmp}/out")
    result = run_streamed(rex, spec, how, on_output)
    assert result.exit_code == 0 and result.stdout.truncated  # the result is capped, as always
    for stream, expected in (("stdout", payload * 2), ("stderr", errors)):
        mine = [c for c in chunks if c.stream == stream]
        assert all(isinstance(c.data, bytes) and c.data for c in mine)
        assert b"".join(c.data for c in mine) == expected
        offsets = [c.offset for c in mine]
        assert offsets == [sum(len(c.data) for c in mine[:i]) for i in range(len(mine))], "a gap or a repeat"
    # On the caller's thread (run) or the event loop's (run_async, here the
    # same thread): never the connection's reader.
    assert threads == {threading.get_ident()}


@pytest.mark.parametrize("how", ["sync", "async"])
def test_the_first_chunk_comes_while_the_command_still_runs(rex: Executor, tmp: str, how: str) -> None:
    pidfile = os.path.join(tmp, "pid")
    token = CancelToken()
    seen: List[Tuple[OutputChunk, bool]] = []

    def on_output(chunk: OutputChunk) -> None:
        seen.append((chunk, alive(read_pid(pidfile))))
        token.cancel()  # it would run for 300 s: the chunk came first

    spec = rex.resolve(f"echo $$ > {pidfile}; echo first; exec sleep 300")
    begun = time.monotonic()
    result = run_streamed(rex, spec, how, on_output, token)
    assert time.monotonic() - begun < 30
    assert seen == [(OutputChunk("stdout", 0, b"first\n"), True)]
    assert result.aborted and result.stdout.text == "first\n"


@pytest.mark.parametrize("how", ["sync", "async"])
def test_an_exception_in_on_output_cancels_the_run_and_is_raised_after_it(rex: Executor, tmp: str, how: str) -> None:
    pidfile = os.path.join(tmp, "pid")
    calls: List[OutputChunk] = []

    class Stop(Exception):
        pass

    def on_output(chunk: OutputChunk) -> None:
        calls.append(chunk)
        raise Stop("enough")

    spec = rex.resolve(f"echo $$ > {pidfile}; for i in $(seq 1 1000); do echo $i; done; exec sleep 300")
    begun = time.monotonic()
    with pytest.raises(Stop, match="enough"):
        run_streamed(rex, spec, how, on_output)
    assert time.monotonic() - begun < 30
    assert len(calls) == 1, "a chunk was handed over after the exception"
    # Raised once the run's answer came: the command is gone by then.
    assert not alive(read_pid(pidfile))
    assert rex.run(rex.resolve("echo after")).stdout.text == "after\n"


@pytest.mark.parametrize("how", ["sync", "async"])
def test_an_exception_in_on_output_after_a_hand_over_kills_the_handed_over_process(
    rex: Executor, tmp: str, how: str
) -> None:
    # The callback raises only after the run was handed over at its
    # timeout: its cancel finds no run, and the caller, who gets the
    # exception, never learns the background id. The process is killed.
    pidfile = os.path.join(tmp, "pid")

    class Stop(Exception):
        pass

    def on_output(chunk: OutputChunk) -> None:
        time.sleep(1.5)  # past the 300 ms timeout: handed over meanwhile
        raise Stop("late")

    spec = rex.resolve(f"echo $$ > {pidfile}; echo up; exec sleep 300", timeout_ms=300, on_expiry="background")
    with pytest.raises(Stop, match="late"):
        run_streamed(rex, spec, how, on_output)
    pid = read_pid(pidfile)
    assert eventually(lambda: not alive(pid), 10), "the handed-over process outlived the failed run"
    # The callback's late cancel is not kept to be sent again after a
    # future drop (there is no run left to cancel).
    assert rex._remote.cancelled_runs == set()


def contiguous(chunks: List[OutputChunk]) -> bool:
    return all(b.offset == a.offset + len(a.data) for a, b in zip(chunks, chunks[1:]))


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_slow_on_output_holds_the_command_back_and_misses_nothing(rex: Executor, how: str) -> None:
    # 24 MiB, past what may wait here (8 MiB) and on the server (8 MiB)
    # while the callback lingers over its first chunk (for less than the
    # 2 s after which it would not be waited for): the command is held back.
    size = 24 << 20
    chunks: List[OutputChunk] = []

    def on_output(chunk: OutputChunk) -> None:
        if not chunks:
            time.sleep(1.5)
        chunks.append(chunk)

    result = run_streamed(rex, rex.resolve(f"head -c {size} /dev/zero", timeout_ms=100_000), how, on_output)
    assert result.exit_code == 0
    assert chunks[0].offset == 0 and contiguous(chunks), "a chunk was left out"
    assert sum(len(c.data) for c in chunks) == size


def test_an_on_output_that_waits_on_the_connection_is_not_waited_for(rex: Executor) -> None:
    """While 8 MiB wait for the callback the connection is read no further;
    a callback that waits for an answer itself would wait for ever. After
    2 s of taking nothing it is not waited for: chunks are left out."""
    size = 40 << 20
    chunks: List[OutputChunk] = []
    listed: List[int] = []

    def on_output(chunk: OutputChunk) -> None:
        if not chunks:
            # Until nearly 8 MiB wait and no more come: the reader waits for
            # this callback (the client's own count; nothing outside shows
            # it). Then a call, whose answer is behind the chunk it holds.
            (stream,) = rex._remote.run_streams.values()
            seen = [0]

            def held() -> bool:
                before, seen[0] = seen[0], stream.waiting_bytes
                time.sleep(0.2)
                return seen[0] > (7 << 20) and stream.waiting_bytes == before == seen[0]

            assert eventually(held, 30)
            listed.append(len(rex.list()))
        chunks.append(chunk)

    begun = time.monotonic()
    result = rex.run(rex.resolve(f"head -c {size} /dev/zero", timeout_ms=100_000), on_output=on_output)
    assert time.monotonic() - begun < 60
    assert result.exit_code == 0 and listed == [0]
    assert not contiguous(chunks), "nothing was left out: the callback was waited for"
    assert all(b.offset > a.offset for a, b in zip(chunks, chunks[1:]))


def test_on_output_must_be_callable(rex: Executor) -> None:
    with pytest.raises(TypeError, match="on_output must be callable"):
        rex.run(rex.resolve("true"), on_output=5)  # type: ignore[arg-type]
    assert rex.run(rex.resolve("echo fine"), on_output=None).stdout.text == "fine\n"


# a transport that goes away ----------------------------------------------------------------


def test_a_dropped_transport_fails_every_waiter_and_leaves_nothing_running(serve: List[str], tmp: str) -> None:
    transport_pid = os.path.join(tmp, "transport.pid")
    ex = Executor(pidfile_wrapper(transport_pid, serve), grace_ms=300)
    try:
        bg = ex.start(ex.resolve(f"echo $$ > {tmp}/bg.pid; exec sleep 300"))
        run_thread, run = in_thread(lambda: ex.run(ex.resolve(f"echo $$ > {tmp}/fg.pid; exec sleep 300")))
        sleepers = [read_pid(f"{tmp}/bg.pid"), read_pid(f"{tmp}/fg.pid")]
        wait_thread, waited = in_thread(lambda: bg.wait())
        assert all(alive(pid) for pid in sleepers)
        # The connection goes, as a network loss or a crash would take it.
        dropped = time.monotonic()
        os.kill(read_pid(transport_pid), signal.SIGKILL)
        run_thread.join(30)
        wait_thread.join(30)
        assert not run_thread.is_alive() and not wait_thread.is_alive(), "a caller still waits on a dead transport"
        for out in (run, waited):
            e = out.get("error")
            assert isinstance(e, TransportError), out
            assert "killed by SIGKILL" in str(e) and serve[0] in str(e)
            assert out["at"] - dropped < 10
        # Nothing of this connection runs on the far side any more.
        assert eventually(lambda: not any(alive(pid) for pid in sleepers), 10), "the far side kept running"
        # Later calls fail at once, naming the transport; close is quiet.
        assert ex.disposed
        with pytest.raises(TransportError):
            ex.list()
        with pytest.raises(TransportError):
            ex.resolve("true")
        with pytest.raises(TransportError):
            _ = bg.status
        ex.close()
        # Closed, it still says the connection was lost rather than make up
        # an empty registry.
        with pytest.raises(TransportError):
            ex.list()
    finally:
        ex.close()


def test_a_server_that_dies_mid_call_names_itself_and_its_last_words(tmp: str) -> None:
    with Executor(fake_server(tmp, "exit-on-call")) as ex:
        start = time.monotonic()
        with pytest.raises(TransportError) as info:
            ex.list()
        assert time.monotonic() - start < 10
        message = str(info.value)
        assert "exited with status 3" in message and "fake server: something broke" in message


def test_a_garbage_collected_executor_ends_its_connection(stdio: List[str], tmp: str) -> None:
    ex = Executor(stdio, grace_ms=300)
    ex.start(ex.resolve(f"echo $$ > {tmp}/pid; exec sleep 300"))
    pid = read_pid(f"{tmp}/pid")
    del ex
    gc.collect()
    assert eventually(lambda: not alive(pid), 15), "an unreferenced executor's command kept running"


def test_executors_left_open_are_closed_at_interpreter_exit(stdio: List[str], tmp: str) -> None:
    script = textwrap.dedent(
        f"""
        from dsh_native.remote import Executor
        ex = Executor({stdio!r})
        p = ex.start(ex.resolve("echo $$ > {tmp}/pid; echo started; exec sleep 300"))
        while not p.read_output().delta:
            pass
        KEEP = ex  # referenced until the interpreter exits
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    pid = read_pid(f"{tmp}/pid")
    assert not alive(pid), "a command outlived the program that left its executor open"


def test_a_forked_child_cannot_use_the_parents_executor(rex: Executor) -> None:
    p = rex.start(rex.resolve("sleep 30"))
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 0
        try:
            rex.list()
        except ForkedChildError:
            code = 1
        except BaseException:
            code = 2
        rex.close()  # must not dispose the parent's executor
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"\x01"
    os.waitpid(child, 0)
    os.close(r)
    assert p.status == "running" and rex.list()[0].id == p.id
    p.kill()


# the unix socket ---------------------------------------------------------------------------


def test_the_unix_socket_face(dsh: str, tmp: str) -> None:
    path = os.path.join(tmp, "dsh.sock")
    server = subprocess.Popen([dsh, "serve", "--listen", f"unix:{path}"], stderr=subprocess.PIPE)
    try:
        assert eventually(lambda: os.path.exists(path)), "the socket never appeared"
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        with Executor(socket=path, grace_ms=300) as a, Executor(socket=path) as b:
            assert a.run(a.resolve("echo over the socket")).stdout.text == "over the socket\n"
            p = a.start(a.resolve(f"echo $$ > {tmp}/pid; exec sleep 300"))
            pid = read_pid(f"{tmp}/pid")
            assert b.list() == [] and [q.id for q in a.list()] == [p.id]  # a registry each
            a.close()
            assert not alive(pid) and p.status == "killed"
            assert b.run(b.resolve("echo b lives")).stdout.text == "b lives\n"
            server.send_signal(signal.SIGTERM)
            server.wait(30)
            with pytest.raises(TransportError) as info:
                b.list()
            assert path in str(info.value)
        assert not os.path.exists(path)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        assert server.stderr is not None
        server.stderr.close()


# a server that breaks the protocol ------------------------------------------------------------

FAKE_SERVER = r"""
import json, sys

mode = sys.argv[1]


def send(message):
    sys.stdout.write(message if isinstance(message, str) else json.dumps(message))
    sys.stdout.write("\n")
    sys.stdout.flush()


for line in sys.stdin:
    call = json.loads(line)
    if call["method"] == "initialize":
        version = 2 if mode == "version-2" else 1
        if mode == "old-server":
            send({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32602,
                  "message": "protocol_version must be 0", "data": {"code": "INVALID_ARGUMENT",
                  "field": "protocol_version"}}})
            continue
        send({"jsonrpc": "2.0", "id": call["id"], "result": {"protocol_version": version,
              "config": {"timeout_ms": 1000}, "sandbox_mode": None, "host": {"cwd": "/", "facts": {}},
              "server": {"name": "fake", "version": "0"}}})
        continue
    if mode == "not-json":
        send("this is not json")
    elif mode == "not-utf8":
        sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":2,"result":"\xff"}\n')
        sys.stdout.flush()
    elif mode == "array":
        send([{"jsonrpc": "2.0", "id": call["id"], "result": {}}])
    elif mode == "unknown-id":
        send({"jsonrpc": "2.0", "id": 999, "result": {}})
    elif mode == "request":
        send({"jsonrpc": "2.0", "id": 1, "method": "list", "params": {}})
    elif mode == "null-id":
        send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "not JSON: oops"}})
    elif mode == "bad-notification":
        send({"jsonrpc": "2.0", "method": "task_done", "params": {"process": 5}})
    elif mode == "wrong-shape":
        send({"jsonrpc": "2.0", "id": call["id"], "result": {"processes": "none"}})
    elif mode == "unknown-notification":
        send({"jsonrpc": "2.0", "method": "news", "params": {"x": 1}})
        send({"jsonrpc": "2.0", "id": call["id"], "result": {"processes": []}})
    elif mode == "exit-on-call":
        sys.stderr.write("fake server: something broke\n")
        sys.stderr.flush()
        sys.exit(3)
"""


def fake_server(tmp: str, mode: str) -> List[str]:
    path = os.path.join(tmp, "fake_server.py")
    with open(path, "w") as f:
        f.write(FAKE_SERVER)
    return [sys.executable, path, mode]


@pytest.mark.parametrize(
    "mode, needle",
    [
        ("not-json", "a line that is not JSON"),
        ("not-utf8", "a line that is not JSON"),
        ("array", "not a JSON-RPC 2.0 message"),
        ("unknown-id", "a request this client did not send"),
        ("request", "a request or a malformed notification"),
        ("null-id", "could not read a message from this client (not JSON: oops)"),
        ("bad-notification", "a notification of the wrong shape"),
    ],
)
def test_a_server_that_breaks_the_protocol_is_a_clear_error(tmp: str, mode: str, needle: str) -> None:
    ex = Executor(fake_server(tmp, mode))
    start = time.monotonic()
    with pytest.raises(ProtocolError) as info:
        ex.list()
    assert needle in str(info.value) and "fake_server.py" in str(info.value), str(info.value)
    assert isinstance(info.value, TransportError)
    # The stream cannot be trusted any more: the connection is ended.
    with pytest.raises(ProtocolError):
        ex.list()
    assert ex.disposed
    ex.close()
    assert time.monotonic() - start < 15


def test_a_result_of_the_wrong_shape_fails_its_call_only(tmp: str) -> None:
    with Executor(fake_server(tmp, "wrong-shape")) as ex:
        for _ in range(2):
            with pytest.raises(ProtocolError, match="answer to list"):
                ex.list()
        assert not ex.disposed


def test_a_notification_the_client_does_not_know_is_ignored(tmp: str) -> None:
    with Executor(fake_server(tmp, "unknown-notification")) as ex:
        assert ex.list() == []


@pytest.mark.parametrize("mode", ["version-2", "old-server"])
def test_a_server_of_another_protocol_version_is_refused(tmp: str, mode: str) -> None:
    with pytest.raises(ProtocolError, match="protocol version"):
        Executor(fake_server(tmp, mode))


# a server under sshd --------------------------------------------------------------------------------


def test_commands_of_a_server_under_sshd_do_not_source_bashrc(sshd: Sshd, dsh: str, tmp: str) -> None:
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    with open(os.path.join(home, ".bashrc"), "w") as f:
        f.write(f"touch {home}/sourced\n")
    # Does this host's bash source ~/.bashrc in a `bash -c` under sshd at all
    # (Debian builds it with SSH_SOURCE_BASHRC)?
    subprocess.run(sshd.ssh("env", f"HOME={home}", "bash", "-c", "true"), check=True, timeout=60)
    if not os.path.exists(f"{home}/sourced"):
        pytest.skip("this host's bash does not source ~/.bashrc for `bash -c` under sshd")
    os.unlink(f"{home}/sourced")
    with Executor(sshd.ssh("env", f"HOME={home}", dsh, "serve", "--stdio")) as ex:
        ex.run(ex.resolve("true"))
    # The core sets SHLVL=1 where SSH_CLIENT is set and no level is, so bash
    # does not take a command for the shell sshd starts (docs/environment.md).
    assert not os.path.exists(f"{home}/sourced"), "a command sourced ~/.bashrc"


# the far side's processes, once the executor is closed ---------------------------------------------


def test_after_close_handles_and_by_id_calls_answer_from_what_was_kept(rex: Executor) -> None:
    done = rex.start(rex.resolve("echo kept"))
    done.wait(30)
    running = rex.start(rex.resolve("echo started; exec sleep 300"))
    read_until(running, "started")  # type: ignore[arg-type]
    rex.close()
    assert [p.id for p in rex.list()] == [done.id, running.id]
    got = rex.get(running.id)
    assert got is not None and got.status == "killed" and got.done
    assert rex.read_output(done.id).delta == "kept\n" and done.read_output().delta == ""
    assert rex.owner_of(done.id) is None and rex.kill(done.id) is False
    rex.forget(done.id)
    with pytest.raises(NotFoundError):
        rex.owner_of(done.id)
    with pytest.raises(DisposedError):
        rex.resolve("true")
    with pytest.raises(StdinClosedError):
        running.write_stdin("x")


# terminal sessions ----------------------------------------------------------------------------------
#
# The terminal contract, run against the local executor and the remote one
# over each transport: what test_contract.py skips for remotes, and what
# only a connection can get wrong (a read that gave up, a lost transport).

BASH = ["bash", "--norc", "--noprofile", "-i"]
QUIET = {"PS1": "$ ", "HISTFILE": ""}

AnyExecutor = Union[dsh_native.Executor, Executor]
AnyTerminal = Union[dsh_native.Terminal, RemoteTerminal]


@pytest.fixture(params=["local", "stdio", "ssh"])
def make_any(request: pytest.FixtureRequest, dsh: str) -> Iterator[Callable[..., AnyExecutor]]:
    """An executor constructor: the local one, or a remote one over `dsh
    serve --stdio` as a child or across ssh. Each one made is closed."""
    made: List[AnyExecutor] = []

    def make(**config: Any) -> AnyExecutor:
        executor: AnyExecutor
        if request.param == "local":
            executor = dsh_native.Executor(**config)
        elif request.param == "stdio":
            executor = Executor([dsh, "serve", "--stdio"], **config)
        else:
            sshd: Sshd = request.getfixturevalue("sshd")
            executor = Executor(sshd.serve_command(dsh), **config)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()


@pytest.fixture
def tex(make_any: Callable[..., AnyExecutor]) -> AnyExecutor:
    return make_any(grace_ms=300)


class Screen:
    """Everything a terminal printed, and a cursor for `expect`."""

    def __init__(self, term: AnyTerminal) -> None:
        self.term = term
        self.seen = ""
        self.mark = 0

    def expect(self, pattern: str, limit: float = 30.0) -> None:
        end = time.monotonic() + limit
        while pattern not in self.seen[self.mark :]:
            assert time.monotonic() < end, f"never saw {pattern!r}: {self.seen!r}"
            self.seen += self.term.read(timeout=0.5)
        self.mark = self.seen.index(pattern, self.mark) + len(pattern)

    def pids(self, count: int, limit: float = 30.0) -> List[int]:
        """Waits for `count` lines `pid=N` (the echoed input shows `pid=$!`)."""
        end = time.monotonic() + limit
        while len(re.findall(r"pid=(\d+)\r?\n", self.seen)) < count:
            assert time.monotonic() < end, f"never saw {count} pids: {self.seen!r}"
            self.seen += self.term.read(timeout=0.5)
        return [int(p) for p in re.findall(r"pid=(\d+)\r?\n", self.seen)]

    def drain(self, limit: float = 30.0) -> str:
        """Reads until the output has ended; what was read."""
        end = time.monotonic() + limit
        start = len(self.seen)
        while not self.term.output_ended:
            assert time.monotonic() < end, f"the output never ended: {self.seen!r}"
            self.seen += self.term.read(timeout=0.5)
        return self.seen[start:]


def waiting(term: AnyTerminal) -> Union[dsh_native.Foreground, RemoteForeground]:
    """The foreground, once the kernel shows it waiting for input."""
    assert term.wait_input_waiting(timeout=30), f"never waiting: {term.inspect_foreground()!r}"
    fg = term.inspect_foreground()
    assert fg is not None and fg.input_waiting, fg
    return fg


def test_terminal_an_interactive_bash_is_driven_by_write_and_read(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(BASH, env=QUIET)
    screen = Screen(term)
    assert waiting(term).process_group_id == term.pid
    assert (term.exited, term.exit_code, term.signal) == (False, None, None)
    term.write("echo $((6 * 7))-done\n")
    screen.expect("42-done")
    term.write(b"echo \xc3\xa9t\xc3\xa9-$((1 + 1))\n")
    screen.expect("\u00e9t\u00e9-2")
    term.write("exit 3\r")
    term.wait(timeout=30)
    assert (term.exited, term.exit_code, term.signal, term.exit_status_unavailable) == (True, 3, None, False)
    with pytest.raises(dsh_native.TerminalClosedError):
        term.write("x")
    with pytest.raises(dsh_native.TerminalClosedError):
        term.signal_foreground("SIGINT")
    assert term.inspect_foreground() is None
    assert term.wait_input_waiting(timeout=1) is False
    screen.drain()
    assert "exit" in screen.seen[screen.mark :]
    assert term.output_ended and term.read_output() == "" and term.read(timeout=0.1) == ""
    assert term.terminate() == 0 and term.survivors == 0


def test_terminal_resize_is_seen_by_stty(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(BASH, env=QUIET, rows=30, cols=100)
    screen = Screen(term)
    waiting(term)
    term.write("echo size=$(stty size)\n")
    screen.expect("size=30 100")
    term.resize(45, 123.0)
    term.write("echo size=$(stty size)\n")
    screen.expect("size=45 123")
    with pytest.raises(dsh_native.InvalidArgumentError) as e:
        term.resize(0, 80)
    assert e.value.field == "terminal.rows"
    with pytest.raises(dsh_native.InvalidArgumentError) as e:
        term.resize(24, 70000)
    assert e.value.field == "terminal.cols"
    assert term.terminate() == 0


def test_terminal_wait_input_waiting_sees_the_written_line_taken_first(tex: AnyExecutor, tmp: str) -> None:
    fifo = os.path.join(tmp, "go")
    os.mkfifo(fifo)
    # After each line it reads, it waits on the fifo, not the terminal.
    term = tex.spawn_terminal(command=f"while read -r x; do read -r y < '{fifo}'; done")
    for i in range(5):
        assert term.wait_input_waiting(timeout=30)
        term.write(f"line{i}\n")
        fg = term.inspect_foreground()
        assert fg is not None and not fg.input_waiting, f"round {i}: waiting right after a write"
        assert term.wait_input_waiting(timeout=0.2) is False
        with open(fifo, "w") as f:
            f.write("go\n")
    assert term.terminate() == 0
    assert term.wait_input_waiting(timeout=1) is False


def test_terminal_signal_foreground_interrupts_sleep_and_the_shell_survives(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(BASH, env=QUIET)
    screen = Screen(term)
    waiting(term)
    term.write("sleep 100\n")

    def sleep_in_front() -> bool:
        fg = term.inspect_foreground()
        return fg is not None and fg.process_group_id != term.pid

    assert eventually(sleep_in_front, 30.0)
    fg = term.inspect_foreground()
    assert fg is not None
    # The group is in front from bash's fork on; signalled before the child
    # has become sleep, bash's handler in that child may swallow it.
    assert eventually(lambda: comm(fg.process_group_id) == "sleep", 30.0)
    assert fg is not None and not fg.input_waiting
    assert term.signal_foreground("SIGINT") == fg.process_group_id
    assert waiting(term).process_group_id == term.pid
    term.write("echo st=$?\n")
    screen.expect("st=130")
    with pytest.raises(dsh_native.InvalidArgumentError) as e:
        term.signal_foreground("SIGUSR1")  # type: ignore[arg-type]
    assert e.value.field == "terminal.signal"
    assert term.terminate() == 0
    assert not alive(term.pid)


def test_terminal_terminate_ends_a_session_that_traps_hup_and_term(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(BASH, env=QUIET)
    screen = Screen(term)
    waiting(term)
    term.write(
        "trap '' HUP TERM; (trap '' TERM HUP; exec sleep 1000) & echo pid=$!; "
        "nohup sleep 1000 >/dev/null 2>&1 & echo pid=$!\n"
    )
    pids = screen.pids(2) + [term.pid]
    assert all(alive(p) for p in pids)
    assert term.terminate() == 0
    for p in pids:
        assert not alive(p), f"{p} survived terminate()"
    # The shell ignored SIGHUP and SIGTERM: SIGKILL after the grace ended it.
    assert (term.exited, term.exit_code, term.signal, term.survivors) == (True, None, "SIGKILL", 0)
    assert term.terminate() == 0  # idempotent
    term.wait(timeout=0)


def test_terminal_a_multibyte_character_is_never_split(tex: AnyExecutor) -> None:
    # The euro sign's three bytes, with a pause after the first: the first
    # read gets what is whole ("a"; all of it only on a host slower than
    # the pause), and the incomplete character waits for its end.
    term = tex.spawn_terminal(command="printf 'a\\342'; sleep 1; printf '\\202\\254b'; exec sleep 100")
    chunks = [term.read(timeout=30)]
    assert chunks[0] in ("a", "a\u20acb"), chunks
    text = "".join(chunks)
    end = time.monotonic() + 30
    while "b" not in text:
        assert time.monotonic() < end, text
        chunk = term.read(timeout=0.5)
        chunks.append(chunk)
        text += chunk
    assert text == "a\u20acb" and "\ufffd" not in text, chunks
    assert term.terminate() == 0
    # Many of them, read in whatever pieces they come in.
    count = 100_000
    term = tex.spawn_terminal(["python3", "-c", f"import sys; sys.stdout.write('\u20ac' * {count})"])
    screen = Screen(term)
    screen.drain(60)
    assert screen.seen == "\u20ac" * count
    term.wait(timeout=30)
    assert term.exit_code == 0


def test_terminal_exit_codes_and_signals(tex: AnyExecutor) -> None:
    cases: List[Tuple[Dict[str, Any], Optional[int], Optional[str]]] = [
        ({"command": "exit 7"}, 7, None),
        ({"command": "true"}, 0, None),
        ({"argv": ["sh", "-c", "exit 5"]}, 5, None),
        ({"argv": ["sh", "-c", "kill -TERM $$"]}, None, "SIGTERM"),
        ({"command": "kill -KILL $$"}, None, "SIGKILL"),
    ]
    for kwargs, code, sig in cases:
        term = tex.spawn_terminal(**kwargs)
        term.wait(timeout=30)
        assert (term.exited, term.exit_code, term.signal) == (True, code, sig), kwargs
        assert term.terminate() == 0


def test_terminal_output_is_an_async_iterator_with_async_calls(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(command="read -r -p 'go? ' a; echo got-$a")

    async def main() -> str:
        chunks: List[str] = []
        it = term.__aiter__()
        while "go? " not in "".join(chunks):
            chunks.append(await it.__anext__())
        await term.write_async("yes\n")
        async for chunk in term:
            chunks.append(chunk)
        with pytest.raises(StopAsyncIteration):
            await term.__anext__()
        await term.wait_async()
        assert await term.terminate_async() == 0
        return "".join(chunks)

    text = asyncio.run(asyncio.wait_for(main(), 30))
    assert "got-yes" in text
    assert term.exit_code == 0 and term.output_ended


def test_terminal_output_nobody_reads_holds_the_program(make_any: Callable[..., AnyExecutor]) -> None:
    # The bound on unread output holds across the connection: the remote
    # client asks for output only when someone reads.
    ex = make_any(grace_ms=300, max_output_bytes=1 << 16)
    size = 4 << 20
    term = ex.spawn_terminal(["python3", "-c", f"import sys; sys.stdout.write('x' * {size}); print('END')"])
    with pytest.raises(TimeoutError):
        term.wait(timeout=1.5)
    screen = Screen(term)
    screen.drain(60)
    assert screen.seen.count("x") == size and screen.seen.endswith("END\r\n")
    term.wait(timeout=30)
    assert term.exit_code == 0


def test_terminal_readers_on_many_threads_get_every_byte_once(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(command="for i in $(seq 1 3000); do echo line-$i; done")
    expected = "".join(f"line-{i}\r\n" for i in range(1, 3001))
    got: List[List[str]] = [[] for _ in range(4)]

    def reader(mine: List[str]) -> None:
        end = time.monotonic() + 60
        while not term.output_ended and time.monotonic() < end:
            mine.append(term.read(timeout=0.2))

    threads = [threading.Thread(target=reader, args=(g,), daemon=True) for g in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive()
    text = "".join("".join(g) for g in got)
    assert sorted(text) == sorted(expected), (len(text), len(expected))


def test_terminal_read_waits_for_its_timeout_and_no_longer(tex: AnyExecutor) -> None:
    term = tex.spawn_terminal(["sleep", "100"])
    assert term.read_output() == "" and term.read(timeout=0) == ""
    start = time.monotonic()
    assert term.read(timeout=0.3) == ""
    assert 0.25 <= time.monotonic() - start < 10
    with pytest.raises(TimeoutError, match="is still running"):
        term.wait(timeout=0.2)
    with pytest.raises(TimeoutError):
        term.wait(timeout=0)
    assert not term.output_ended
    assert term.terminate() == 0
    assert term.exited and term.signal == "SIGHUP"


def test_terminal_after_close_answers_from_what_was_kept(tex: AnyExecutor, tmp: str) -> None:
    printed = os.path.join(tmp, "printed")
    term = tex.spawn_terminal(command=f"echo kept-for-later; touch {printed}; exec sleep 1000")
    assert eventually(lambda: os.path.exists(printed))
    other = tex.spawn_terminal(["cat"])
    tex.close()
    assert (term.exited, term.exit_code, term.signal, term.survivors) == (True, None, "SIGHUP", 0)
    screen = Screen(term)
    screen.drain()
    assert "kept-for-later" in screen.seen
    assert term.output_ended and term.read_output() == "" and term.read(timeout=0.1) == ""
    with pytest.raises(dsh_native.TerminalClosedError):
        term.write("x")
    with pytest.raises(dsh_native.TerminalClosedError):
        term.resize(24, 80)
    with pytest.raises(dsh_native.TerminalClosedError):
        term.signal_foreground("SIGINT")
    assert term.inspect_foreground() is None and term.wait_input_waiting(timeout=1) is False
    assert term.terminate() == 0
    term.wait(timeout=1)

    async def rest() -> List[str]:
        await other.wait_async()
        return [chunk async for chunk in other]

    assert asyncio.run(asyncio.wait_for(rest(), 30)) == []
    assert other.exited and other.signal == "SIGHUP"
    with pytest.raises(DisposedError):
        tex.spawn_terminal(["true"])


def test_terminal_a_write_goes_whole_and_in_order_whatever_its_pieces(
    rex: Executor, tmp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pieces of 1000 bytes: each write is several terminal_write calls.
    import dsh_native.remote._checks

    monkeypatch.setattr(dsh_native.remote._checks, "_STDIN_PIECE", 1000)
    got = os.path.join(tmp, "got")
    term = rex.spawn_terminal(command=f"stty raw -echo; head -c 20000 > {got}; echo done")
    assert term.wait_input_waiting(timeout=30)
    threads = [in_thread(lambda c=c: term.write(c * 5000)) for c in "ab"]  # type: ignore[misc]

    async def more() -> None:
        await asyncio.gather(term.write_async(b"c" * 5000), term.write_async("d" * 5000))

    asyncio.run(asyncio.wait_for(more(), 30))
    for t, out in threads:
        t.join(30)
        assert not t.is_alive() and "error" not in out, out
    Screen(term).expect("done")
    with open(got) as f:
        data = f.read()
    # Each write arrived whole, whatever the others did meanwhile.
    assert sorted(re.findall(r"(.)\1*", data)) == list("abcd") and len(data) == 20000, data[:200]
    assert [len(run) for run in re.findall(r"a+|b+|c+|d+", data)] == [5000] * 4


def test_terminal_a_read_that_gave_up_loses_nothing(rex: Executor) -> None:
    # What a read that was interrupted (Ctrl-C) or timed out (a cancelled
    # __anext__) was going to get goes to the next reader, in order.
    term = rex.spawn_terminal(
        command="stty -echo; read -r a; echo got-$a; read -r b; echo second-$b; exec sleep 100"
    )
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    state = term._state

    def interrupt() -> None:
        assert eventually(lambda: state.reading)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        term.read(timeout=None)
    term.write("one\n")
    screen = Screen(term)
    screen.expect("got-one")

    async def main_loop() -> str:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(term.__anext__(), 0.3)
        await term.write_async("two\n")
        text = ""
        while "second-two" not in text:
            text += await term.__anext__()
        return text

    text = asyncio.run(asyncio.wait_for(main_loop(), 30))
    assert screen.seen + text == "got-one\r\nsecond-two\r\n"
    assert term.terminate() == 0


def test_terminal_a_dropped_transport_fails_every_waiter(serve: List[str], tmp: str) -> None:
    transport_pid = os.path.join(tmp, "transport.pid")
    ex = Executor(pidfile_wrapper(transport_pid, serve), grace_ms=300)
    try:
        term = ex.spawn_terminal(command=f"stty -echo -icanon; echo $$ > {tmp}/t.pid; exec sleep 300")
        pid = read_pid(f"{tmp}/t.pid")
        assert term.wait_input_waiting(timeout=0.2) is False  # sleep reads nothing
        calls: List[Callable[[], Any]] = [
            lambda: term.read(timeout=None),
            lambda: term.wait(),
            lambda: term.wait_input_waiting(timeout=None),
            # Held: the input queue (non-canonical: nothing is dropped) fills.
            lambda: term.write(b"x" * (1 << 20)),
        ]
        waiters = [in_thread(call) for call in calls]

        async def pending() -> List[BaseException]:
            got = await asyncio.gather(term.__anext__(), term.wait_async(), return_exceptions=True)
            return [g for g in got if isinstance(g, BaseException)]

        async_waiter = in_thread(lambda: asyncio.run(asyncio.wait_for(pending(), 60)))
        waiters.append(async_waiter)
        time.sleep(0.5)  # (every call has been sent by now; none can answer)
        assert all(t.is_alive() for t, _ in waiters), [out for _, out in waiters]
        dropped = time.monotonic()
        os.kill(read_pid(transport_pid), signal.SIGKILL)
        for t, out in waiters:
            t.join(30)
            assert not t.is_alive(), "a caller still waits on a dead transport"
        for _, out in waiters[:-1]:
            assert isinstance(out.get("error"), TransportError), out
            assert out["at"] - dropped < 10
        errors = async_waiter[1].get("value")
        assert errors is not None and len(errors) == 2, async_waiter
        assert all(isinstance(e, TransportError) for e in errors), errors
        assert eventually(lambda: not alive(pid), 10), "the far side kept the session running"
        # Later calls fail at once, naming the transport.
        for later in (term.read_output, lambda: term.exited, lambda: term.write("x"), term.terminate):
            with pytest.raises(TransportError):
                later()
        with pytest.raises(TransportError):
            ex.spawn_terminal(["true"])
    finally:
        ex.close()


# The local face's errors for the same mistakes: class, message and
# attributes. Checked types and ranges here, the core's words from the far
# side (whose own parser says `terminal.*` where the local face says
# `request.*`), and what a session says once it is over or closed.


def terminal_failures(ex: Any, tmp: str) -> List[Tuple[Any, ...]]:
    out: List[Tuple[Any, ...]] = []
    pid = [0]

    def expect(call: Callable[[], Any]) -> None:
        try:
            value = call()
        except (DshError, ValueError, TimeoutError) as e:
            facts = error_facts(e)
            if isinstance(e, TimeoutError):  # it names the terminal's pid
                facts = facts[:1] + (facts[1].replace(str(pid[0]), "PID"),) + facts[2:]
            out.append(facts)
        else:
            if isinstance(value, (dsh_native.Terminal, RemoteTerminal)):
                value.terminate()
                value = "a terminal"
            out.append(("no error", value))

    s = ex.spawn_terminal
    nan, inf = float("nan"), float("inf")
    expect(lambda: s())
    expect(lambda: s("bash"))
    expect(lambda: s(5))
    expect(lambda: s(("echo", 5)))
    expect(lambda: s(["echo", "\ud800"]))
    expect(lambda: s([]))
    expect(lambda: s([""]))
    expect(lambda: s(["a\0b"]))
    expect(lambda: s(["true"], command="true"))
    expect(lambda: s(command=5))
    expect(lambda: s(command="a\0b"))
    expect(lambda: s(["true"], cwd=5))
    expect(lambda: s(["true"], cwd="/nonexistent/dsh-py-remote"))
    expect(lambda: s(["true"], cwd=f"{tmp}/\0"))
    expect(lambda: s(["true"], env={"A": 1}))
    expect(lambda: s(["true"], env=["A"]))
    expect(lambda: s(["true"], env={"A": "x\0"}))
    expect(lambda: s(["true"], env={"": "v"}))
    expect(lambda: s(["true"], dsh_env={"FOO": "v"}))
    expect(lambda: s(["true"], dsh_env={"DSH_A": "\ud800"}))
    for key in ("rows", "cols", "grace_ms"):
        for bad in (0, -1, True, "5", 2.5, 70000, nan, inf, 1e12):
            expect(lambda: s(["true"], **{key: bad}))
    for policy in (
        {"mode": "nope"},
        {},
        5,
        {"mode": "read-only", "network": "sometimes"},
        {"mode": "read-only", "workspace_root": 5},
        {"mode": "read-only", "session_id": "\ud800"},
        {"mode": "workspace-write", "workspace_root": "/nonexistent/r"},
        {"mode": "read-only", "network": "loopback"},
    ):
        expect(lambda: s(["true"], sandbox_policy=policy))
    expect(lambda: s(["no-such-program-dsh"]))
    expect(lambda: s(["/nonexistent/dsh-program"]))
    term = s(["cat"])
    pid[0] = term.pid
    expect(lambda: term.write(5))
    expect(lambda: term.write(bytearray(b"x")))
    expect(lambda: term.write("a\ud800"))
    for rows, cols in ((0, 80), (24, 0), (None, 80), (True, 80), ("5", 80), (2.5, 80), (70000, 80), (nan, 80),
                       (-0.0, 80), (1e20, 80), (10**400, 80)):  # fmt: skip
        expect(lambda: term.resize(rows, cols))
    expect(lambda: term.signal_foreground("SIGUSR1"))
    expect(lambda: term.signal_foreground(5))
    expect(lambda: term.signal_foreground("SIG\ud800"))
    for timeout in (-1, -1.5, nan, -inf, -1e300):
        expect(lambda: term.read(timeout))
        expect(lambda: term.wait(timeout))
        expect(lambda: term.wait_input_waiting(timeout))
    expect(lambda: term.wait(0.05))
    expect(lambda: term.wait(0))
    expect(lambda: term.write(b""))
    expect(term.terminate)
    for call in (
        lambda: term.write("x"),
        lambda: term.write(b""),
        lambda: term.resize(24, 80),
        lambda: term.signal_foreground("SIGINT"),
        lambda: term.signal_foreground("SIGX"),
        term.inspect_foreground,
        lambda: term.wait_input_waiting(0.1),
        lambda: (term.exited, term.exit_code, term.signal, term.survivors, term.exit_status_unavailable),
    ):
        expect(call)
    other = s(["cat"])
    pid[0] = other.pid
    ex.close()
    expect(lambda: s(["true"]))
    for call in (
        lambda: other.write("x"),
        lambda: other.resize(24, 80),
        lambda: other.resize(0, 80),
        lambda: other.signal_foreground("SIGINT"),
        lambda: other.signal_foreground("SIGX"),
        lambda: other.wait(-1),
        other.inspect_foreground,
        lambda: other.wait_input_waiting(0.1),
        lambda: other.wait(0),
        other.terminate,
        lambda: (other.exited, other.exit_code, other.signal, other.survivors, other.read_output(), other.output_ended),
    ):
        expect(call)
    return out


def test_terminal_errors_have_the_local_classes_attributes_and_messages(stdio: List[str], tmp: str) -> None:
    local = terminal_failures(dsh_native.Executor(grace_ms=300), tmp)
    remote = terminal_failures(Executor(stdio, grace_ms=300), tmp)
    assert len(local) == len(remote)
    for i, (want, got) in enumerate(zip(local, remote)):
        assert got == want, f"call {i}"
    kinds = {facts[0] for facts in local}
    assert {
        dsh_native.InvalidArgumentError, SpawnError, dsh_native.TerminalClosedError, DisposedError,
        ValueError, TimeoutError,
    } <= kinds  # fmt: skip
    fields = {facts[2] for facts in local if facts[0] is dsh_native.InvalidArgumentError}
    assert {"request.argv", "request.rows", "request.sandbox_policy", "terminal.rows", "terminal.signal"} <= fields
