"""The contract of docs/ (configuration, requests, environment, running,
registry), through Python: each test runs against the local executor and
against dsh_native.remote.Executor over `dsh serve --stdio`, as a child and
across ssh (conftest.py's `transport`)."""

import os
import pathlib
import signal
import stat
import sys
import tempfile
import threading
import time

import pytest

import dsh_native
from dsh_native import (
    CancelToken,
    DisposedError,
    DshError,
    Executor,
    InvalidArgumentError,
    NotFoundError,
    SandboxUnavailableError,
    SpawnError,
)

from conftest import (
    alive,
    eventually,
    landlock_abi,
    landlock_missing,
    process_cwd,
    read_until,
    skip_remote,
)


@pytest.fixture(autouse=True)
def executor_under_test(make_executor, monkeypatch):
    """`Executor` in these tests is the executor of the transport under test."""
    monkeypatch.setattr(sys.modules[__name__], "Executor", make_executor)


# configuration (docs/configuration.md) ----------------------------------------

@pytest.mark.parametrize(
    "config, field",
    [
        ({"timeout_ms": 0}, "config.timeout_ms"),
        ({"timeout_ms": -1}, "config.timeout_ms"),
        ({"max_timeout_ms": float("nan")}, "config.max_timeout_ms"),
        ({"max_output_bytes": float("inf")}, "config.max_output_bytes"),
        ({"max_spill_bytes": 1.5}, "config.max_spill_bytes"),
        ({"grace_ms": 2**31}, "config.grace_ms"),
        ({"grace_ms": 10**400}, "config.grace_ms"),
        ({"grace_ms": "100"}, "config.grace_ms"),
        ({"grace_ms": True}, "config.grace_ms"),
        ({"timeout_ms": 10_000, "max_timeout_ms": 5_000}, "config.timeout_ms"),
        ({"sandbox_mode": "yolo"}, "config.sandbox_mode"),
    ],
)
def test_bad_config_is_refused_naming_the_field(config, field):
    with pytest.raises(InvalidArgumentError) as info:
        Executor(**config)
    assert info.value.field == field
    assert field in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DshError)


def test_unknown_config_keywords_are_refused():
    with pytest.raises(TypeError):
        Executor(timeout=5)  # type: ignore[call-arg]


# resolve (docs/requests.md) -------------------------------------------------

def test_resolve_defaults_and_caps(tmp):
    with Executor(cwd=tmp, timeout_ms=1000, max_timeout_ms=5000, max_output_bytes=777) as ex:
        s = ex.resolve("true")
        assert (s.workdir, s.timeout_ms, s.stdout_max_bytes) == (tmp, 1000, 777)
        assert (s.stdin, s.env, s.dsh_env, s.owner, s.sandbox_policy) == (None, None, None, None, None)
        s = ex.resolve("true", timeout_ms=99_999, stdout_max_bytes=5, workdir="sub", owner="o", stdin="x")
        assert s.timeout_ms == 5000
        assert s.workdir == os.path.join(tmp, "sub")
        assert (s.stdout_max_bytes, s.owner, s.stdin) == (5, "o", b"x")


def test_workdir_defaults_to_the_process_cwd(ex):
    assert ex.resolve("true").workdir == process_cwd(ex)


@pytest.mark.parametrize(
    "kwargs, field, needle",
    [
        ({"command": "a\0b"}, "request.command", "NUL"),
        ({"timeout_ms": 0}, "request.timeout_ms", "positive"),
        ({"timeout_ms": float("nan")}, "request.timeout_ms", "finite"),
        ({"stdout_max_bytes": 2.5}, "request.stdout_max_bytes", "whole"),
        ({"stdout_max_bytes": -3}, "request.stdout_max_bytes", "positive"),
        ({"workdir": "/tmp/\0"}, "request.workdir", "NUL"),
        ({"workdir": b"/tmp/\0"}, "request.workdir", "NUL"),
        ({"workdir": b""}, "request.workdir", "empty"),
        ({"workdir": 5}, "request.workdir", "str, bytes or os.PathLike, got int"),
        ({"workdir": bytearray(b"/tmp")}, "request.workdir", "got bytearray"),
        ({"workdir": "/tmp/\ud800"}, "request.workdir", "filesystem encoding"),
        ({"sandbox_policy": {"mode": "read-only", "workspace_root": 5}}, "request.sandbox_policy", "workspace_root"),
        ({"env": {"": "v"}}, "request.env", "empty"),
        ({"env": {"A=B": "v"}}, "request.env", "'='"),
        ({"env": {"A": "v\0"}}, "request.env", "NUL"),
        ({"env": {"A": 1}}, "request.env", "dict"),
        ({"env": ["A"]}, "request.env", "dict"),
        ({"dsh_env": {"FOO": "v"}}, "request.dsh_env", "DSH_"),
        ({"stdin": 5}, "request.stdin", "bytes"),
        ({"sandbox_policy": {"mode": "nope"}}, "request.sandbox_policy", "nope"),
        ({"sandbox_policy": {}}, "request.sandbox_policy", "mode"),
        # A misspelt key must not leave the network open unnoticed.
        ({"sandbox_policy": {"mode": "danger-full-access", "netwrok": "deny"}}, "request.sandbox_policy",
         'unknown key "netwrok"'),
    ],
)
def test_bad_requests_are_errors_naming_the_field(ex, kwargs, field, needle):
    kwargs = dict(kwargs)  # the parameter is shared by every transport's run
    command = kwargs.pop("command", "true")
    with pytest.raises(InvalidArgumentError) as info:
        ex.resolve(command, **kwargs)
    assert info.value.field == field
    assert needle in str(info.value)


def test_workdir_is_a_path_as_subprocess_takes_cwd(ex, transport):
    skip_remote(transport, "the protocol carries paths as UTF-8 text: a name that is not UTF-8 is "
                "refused naming its field (test_remote.py checks that)")
    # A directory whose name is not UTF-8: given as bytes, as a pathlib.Path
    # and as the str os.fsdecode makes of it, it is the same directory.
    with tempfile.TemporaryDirectory(prefix="dsh-py-bytes-") as base:
        raw = os.fsencode(base) + b"/dir-\xff\xfe"
        os.mkdir(raw)
        decoded = os.fsdecode(raw)
        assert "\udcff" in decoded
        out = os.path.join(base, "pwd.out")
        for workdir in (raw, pathlib.Path(decoded), decoded):
            spec = ex.resolve('pwd > "$OUT"', workdir=workdir, env={"OUT": out})
            assert isinstance(spec.workdir, str) and spec.workdir == decoded
            assert os.fsencode(spec.workdir) == raw
            assert repr(decoded) in repr(spec)
            r = ex.run(spec)
            assert r.exit_code == 0, r.stderr.text
            with open(out, "rb") as f:
                assert f.read() == raw + b"\n"
            os.unlink(out)
        # The returned str goes back in as it came out.
        assert ex.resolve("true", workdir=spec.workdir).workdir == decoded
        # Relative bytes join the configured cwd.
        with Executor(cwd=base) as in_base:
            assert in_base.resolve("true", workdir=b"dir-\xff\xfe").workdir == decoded
        # workspace_root: the same three forms, and a policy handed back.
        for root in (raw, pathlib.Path(decoded), decoded):
            s = ex.resolve("true", sandbox_policy={"mode": "danger-full-access", "workspace_root": root})
            assert s.sandbox_policy is not None and s.sandbox_policy.workspace_root == decoded
            again = ex.resolve("true", sandbox_policy=s.sandbox_policy).sandbox_policy
            assert again is not None and again.workspace_root == decoded
            assert repr(decoded) in repr(again)
        s = ex.resolve("true", workdir=raw, sandbox_policy={"mode": "danger-full-access"})
        assert s.sandbox_policy is not None and s.sandbox_policy.workspace_root == decoded


def test_sandbox_policy_is_stamped_from_config_or_request(tmp):
    with Executor(sandbox_mode="read-only") as ex:
        assert ex.sandbox_mode == "read-only"
        p = ex.resolve("true").sandbox_policy
        assert p is not None and (p.mode, p.workspace_root) == ("read-only", process_cwd(ex))
        s = ex.resolve("true", sandbox_policy={"mode": "danger-full-access", "workspace_root": tmp})
        assert s.sandbox_policy is not None and s.sandbox_policy.mode == "danger-full-access"
    with Executor() as ex:
        assert ex.sandbox_mode is None


# environment (docs/environment.md) --------------------------------------------

def test_environment_scrub_and_precedence(ex, monkeypatch, transport):
    skip_remote(transport, "commands get the server's environment, not this process's "
                "(test_remote.py checks the scrub of the server's)")
    monkeypatch.setenv("MY_API_KEY", "leak1")
    monkeypatch.setenv("db_password", "leak2")
    monkeypatch.setenv("DSH_STALE", "leak3")
    monkeypatch.setenv("Some_Secret_Thing", "leak4")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    monkeypatch.setenv("GITHUB_TOKEN", "leak5")
    spec = ex.resolve(
        "env",
        env={"GITHUB_TOKEN": "explicit", "PAGER": "less", "DSH_X": "from-env"},
        dsh_env={"DSH_X": "from-dsh-env"},
    )
    out = ex.run(spec).stdout.text
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    for leak in ("leak1", "leak2", "leak3", "leak4", "leak5"):
        assert leak not in out
    assert env["PLAIN_SETTING"] == "kept"
    assert (env["NO_COLOR"], env["TERM"], env["GIT_PAGER"]) == ("1", "dumb", "cat")
    assert env["PAGER"] == "less"
    assert env["GITHUB_TOKEN"] == "explicit"
    assert env["DSH_X"] == "from-dsh-env"


# run (docs/running.md) ----------------------------------------------------------

def test_stdin_str_or_bytes_then_eof(ex):
    assert ex.run(ex.resolve("cat", stdin="héllo")).stdout.text == "héllo"
    assert ex.run(ex.resolve("wc -c", stdin=b"\x00\x01\x02")).stdout.text.strip() == "3"
    assert ex.run(ex.resolve("readlink /proc/self/fd/0")).stdout.text == "/dev/null\n"


def test_nonzero_exit_is_a_result_with_readable_repr(ex):
    r = ex.run(ex.resolve("echo out; echo err >&2; exit 42"))
    assert (r.exit_code, r.signal, r.timed_out, r.aborted) == (42, None, False, False)
    assert (r.stdout.text, r.stderr.text) == ("out\n", "err\n")
    assert r.timeout_ms == 120_000 and r.sandbox is None
    assert "exit_code=42" in repr(r) and "out\\n" in repr(r)


def test_caps_tail_and_complete_spill_file():
    with Executor(max_output_bytes=100) as ex:
        r = ex.run(ex.resolve("seq 1 20000; seq 1 200 >&2", stdout_max_bytes=50))
        full = "".join(f"{i}\n" for i in range(1, 20001))
        assert r.stdout.truncated and r.stderr.truncated
        assert r.stdout.text == full[-50:]
        assert r.stderr.text == "".join(f"{i}\n" for i in range(1, 201))[-100:]
        path = r.stdout.spill_path
        assert path is not None
        with open(path) as f:
            assert f.read() == full
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


def test_spill_is_dropped_past_max_spill_bytes():
    with Executor(max_output_bytes=100, max_spill_bytes=10_000) as ex:
        r = ex.run(ex.resolve("seq 1 5000"))
        assert r.stdout.truncated and r.stdout.spill_path is None


def test_timeout_cancel_and_self_kill_are_told_apart(ex, tmp):
    r = ex.run(ex.resolve("sleep 30", timeout_ms=200))
    assert (r.timed_out, r.aborted, r.signal, r.exit_code, r.timeout_ms) == (True, False, "SIGTERM", None, 200)

    token = CancelToken()
    mark = os.path.join(tmp, "started")
    threading.Thread(target=lambda: eventually(lambda: os.path.exists(mark)) and token.cancel()).start()
    r = ex.run(ex.resolve(f"touch {mark}; sleep 30"), cancel=token)
    assert (r.timed_out, r.aborted, r.signal) == (False, True, "SIGTERM")
    assert token.cancelled
    with pytest.raises(dsh_native.AlreadyCancelledError):
        ex.run(ex.resolve("true"), cancel=token)

    r = ex.run(ex.resolve("kill -KILL $$"))
    assert (r.timed_out, r.aborted, r.signal, r.exit_code) == (False, False, "SIGKILL", None)


def _pid_is_free(pid: int) -> bool:
    """No process, not even a zombie, holds `pid` (kill(pid, 0) is ESRCH)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_settled_run_or_process_has_reaped_its_leader(ex):
    # A harness checks that a cancelled hook was reaped: when a result, a
    # wait or close returns, the leader's pid is free, however it ended.
    for _ in range(3):
        r = ex.run(ex.resolve("echo $$"))
        assert _pid_is_free(int(r.stdout.text)), "exit left its leader"
        r = ex.run(ex.resolve("echo $$; exec sleep 30", timeout_ms=200))
        assert r.timed_out and _pid_is_free(int(r.stdout.text)), "a timeout left its leader"
        token = CancelToken()
        threading.Timer(0.1, token.cancel).start()
        r = ex.run(ex.resolve("echo $$; exec sleep 30"), cancel=token)
        assert r.aborted and _pid_is_free(int(r.stdout.text)), "an abort left its leader"

        p = ex.start(ex.resolve("echo $$; exec sleep 30"))
        pid = int(read_until(p, "\n"))
        assert p.kill()
        p.wait(timeout=30)
        assert _pid_is_free(pid), "kill left its leader"
        p = ex.start(ex.resolve("echo $$"))
        p.wait(timeout=30)
        assert _pid_is_free(int(p.read_output().delta)), "an exit left its leader"
    p = ex.start(ex.resolve("echo $$; exec sleep 30"))
    pid = int(read_until(p, "\n"))
    ex.close()
    assert _pid_is_free(pid), "close left a leader unreaped"


def test_a_stopped_supervisor_does_not_wedge_the_executor(tmp):
    # The executor's supervisor is stopped while a run waits (from outside
    # its commands' reach: where Landlock cannot scope signals, before Linux
    # 6.12, a command can do it with `kill -STOP $PPID`); the run settles at
    # its timeout anyway, and the next one runs. In a thread, so a wedge
    # fails the test instead of hanging it.
    with Executor(grace_ms=500) as ex:
        supervisor = int(ex.run(ex.resolve("echo $PPID")).stdout.text)
        mark = os.path.join(tmp, "running")
        results = []

        def runs() -> None:
            start = time.monotonic()
            r = ex.run(ex.resolve(f"touch {mark}; sleep 30", timeout_ms=2000))
            results.append((r.timed_out, time.monotonic() - start))
            results.append(ex.run(ex.resolve("echo again")).stdout.text)

        t = threading.Thread(target=runs, daemon=True)
        t.start()
        deadline = time.monotonic() + 20
        while not os.path.exists(mark) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(mark), "the command never started"
        os.kill(supervisor, signal.SIGSTOP)
        t.join(30)
        assert not t.is_alive(), "the executor is wedged"
        (timed_out, took), again = results
        assert timed_out and took <= 2.0 + 0.5 + 1.0, took
        assert again == "again\n"


def test_a_command_cannot_signal_its_supervisor_or_host():
    # Where Landlock scopes signals (ABI 6, Linux 6.12), every command runs
    # in a domain that keeps its signals inside its own tree
    # (docs/host-death.md), danger-full-access included.
    abi = landlock_abi()
    if abi < 6:
        pytest.skip(f"this kernel's Landlock (ABI {abi}) cannot scope signals (ABI 6, Linux 6.12)")
    with Executor() as ex:
        probe = (
            f"kill -0 $PPID 2>/dev/null; echo supervisor=$?; kill -0 {os.getpid()} 2>/dev/null; echo host=$?; "
            "sleep 30 & kill $!; wait $!; echo own=$?"
        )
        r = ex.run(ex.resolve(probe))
        assert r.stdout.text == "supervisor=1\nhost=1\nown=143\n", r


def test_a_cancellation_after_the_command_exited_is_not_an_abort(tmp):
    # The command exits 3 on its own; a background job holds its output
    # open, so the run has not settled when the cancellation comes.
    with Executor(grace_ms=3000) as ex:
        pidfile = os.path.join(tmp, "pid")
        token = CancelToken()

        def cancel_once_exited() -> None:
            def leader_gone() -> bool:
                try:
                    return not alive(int(open(pidfile).read()))
                except (OSError, ValueError):
                    return False

            eventually(leader_gone)
            token.cancel()

        t = threading.Thread(target=cancel_once_exited)
        t.start()
        r = ex.run(ex.resolve(f"echo $$ > {pidfile}; sleep 5 & exit 3"), cancel=token)
        t.join()
        assert (r.aborted, r.timed_out, r.exit_code, r.signal) == (False, False, 3, None), r


def test_term_trapping_command_dies_by_sigkill_after_grace(ex):
    r = ex.run(ex.resolve("trap 'echo got-term' TERM; while :; do sleep 0.05; done", timeout_ms=200))
    assert r.timed_out and r.signal == "SIGKILL" and "got-term" in r.stdout.text
    assert r.survivors == 0, "the stop ended with nothing of the tree alive"


def test_background_grandchild_does_not_hang_run(ex):
    start = time.monotonic()
    r = ex.run(ex.resolve("sleep 30 & echo $!"))
    assert time.monotonic() - start < 15
    pid = int(r.stdout.text)
    ex.close()
    assert eventually(lambda: not alive(pid))


def test_spawn_failures_are_oserrors_with_errno(ex):
    with pytest.raises(SpawnError) as info:
        ex.run(ex.resolve("true", workdir="/nonexistent/dsh-py"))
    e = info.value
    assert isinstance(e, OSError) and e.errno == 2
    assert "ENOENT" in str(e) and "/nonexistent/dsh-py" in str(e)
    with pytest.raises(SpawnError) as info:
        ex.run(ex.resolve("true", env={"PATH": "/nonexistent"}))
    assert info.value.errno == 2 and "bash" in str(info.value)


@pytest.fixture
def sandbox_dirs():
    import shutil
    base = f"/var/tmp/dsh-py-sandbox-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(f"{base}/ws")
    os.makedirs(f"{base}/outside")
    yield f"{base}/ws", f"{base}/outside"
    shutil.rmtree(base, ignore_errors=True)


def test_landlock_confines_writes_to_the_workspace(landlock, sandbox_dirs):
    ws, out = sandbox_dirs
    with Executor(sandbox_mode="workspace-write", cwd=ws) as ex:
        assert ex.sandbox_mode == "workspace-write"
        r = ex.run(ex.resolve(f"echo in > inside; bash -c 'bash -c \"echo g > {out}/grandchild\"'; echo x > {out}/direct"))
        assert os.path.exists(f"{ws}/inside")
        assert not os.path.exists(f"{out}/grandchild") and not os.path.exists(f"{out}/direct")
        assert r.sandbox is not None
        assert (r.sandbox.mode, r.sandbox.denied, r.sandbox.enforcement, r.sandbox.runner_failed) == (
            "workspace-write", True, "full", None)
        ro = ex.run(ex.resolve("touch inside-ro", sandbox_policy={"mode": "read-only"}))
        assert ro.sandbox is not None and ro.sandbox.mode == "read-only" and ro.sandbox.denied
        # Read-only mounts where the host allows them: metadata outside the
        # workspace is refused too, and the fact says so.
        mounts = dsh_native.metadata_unavailable() is None
        assert ro.sandbox.metadata is mounts and r.sandbox.metadata is mounts
        pathlib.Path(f"{out}/meta").touch(mode=0o644)
        os.chmod(f"{out}/meta", 0o644)
        ex.run(ex.resolve(f"chmod 600 {out}/meta"))
        assert stat.S_IMODE(os.stat(f"{out}/meta").st_mode) == (0o644 if mounts else 0o600)
        assert not os.path.exists(f"{ws}/inside-ro")
        d = ex.run(ex.resolve(f"echo x > {out}/danger", sandbox_policy={"mode": "danger-full-access"}))
        assert os.path.exists(f"{out}/danger")
        assert d.sandbox is not None and (d.sandbox.denied, d.sandbox.enforcement, d.sandbox.metadata) == (False, None, False)


def test_confinement_that_cannot_be_applied_fails_closed(sandbox_dirs):
    _, out = sandbox_dirs
    with Executor() as ex:
        spec = ex.resolve(f"touch {out}/ran", sandbox_policy={"mode": "workspace-write", "workspace_root": "/nonexistent/dsh-root"})
        with pytest.raises(SandboxUnavailableError) as info:
            ex.run(spec)
        # Without Landlock it fails closed too, for that reason instead.
        cause = "Landlock" if landlock_missing() else "/nonexistent/dsh-root"
        assert isinstance(info.value, DshError) and cause in str(info.value)
        p = ex.start(spec)
        p.wait(30)
        assert p.status == "killed"
        assert p.sandbox is not None and p.sandbox.runner_failed is True
        assert not os.path.exists(f"{out}/ran")


def test_disposed_executor_refuses_work():
    ex = Executor()
    spec = ex.resolve("true")
    ex.close()
    ex.close()
    assert ex.disposed
    with pytest.raises(DisposedError):
        ex.run(spec)
    with pytest.raises(DisposedError):
        ex.start(spec)


# background (docs/running.md) -----------------------------------------------

def test_background_status_exit_and_signal(ex):
    p = ex.start(ex.resolve("exit 3"))
    p.wait(30)
    assert (p.status, p.exit_code, p.signal, p.done) == ("completed", 3, None, True)
    p = ex.start(ex.resolve("kill -USR1 $$"))
    p.wait(30)
    assert (p.status, p.exit_code, p.signal) == ("killed", None, "SIGUSR1")


def test_kill_true_once_then_false_and_escalates(ex):
    p = ex.start(ex.resolve("trap 'echo got-term' TERM; echo armed; while :; do sleep 0.05; done"))
    read_until(p, "armed")
    with pytest.raises(TimeoutError):
        p.wait(timeout=0.05)
    assert p.kill() is True
    assert p.status == "killed"
    assert p.kill() is False
    p.wait()
    assert p.signal == "SIGKILL"
    assert "got-term" in p.read_output().delta
    assert p.survivors == 0


def test_reads_are_consuming_with_stderr_sections(ex, tmp):
    go = os.path.join(tmp, "go")
    p = ex.start(ex.resolve(f"echo first; while [ ! -e {go} ]; do sleep 0.01; done; printf abc; printf def >&2"))
    assert read_until(p, "first") == "first\n"
    assert p.read_output().delta == ""
    open(go, "w").close()
    p.wait(30)
    read = p.read_output()
    assert read.delta == "abc\n[stderr]\ndef"
    assert not read.lossy and read.stdout_spill_path is None
    assert p.read_output().delta == ""


def test_lossy_reads_and_spill_paths():
    with Executor(max_output_bytes=100) as ex:
        p = ex.start(ex.resolve("seq 1 1000 >&2"))
        p.wait(30)
        read = p.read_output()
        full = "".join(f"{i}\n" for i in range(1, 1001))
        assert read.lossy and read.delta == "[stderr]\n" + full[-100:]
        assert read.stdout_spill_path is None and read.stderr_spill_path is not None
        with open(read.stderr_spill_path) as f:
            assert f.read() == full


def test_spawn_failure_settles_killed_and_says_so_once(ex):
    p = ex.start(ex.resolve("true", workdir="/nonexistent/dsh-bg"))
    p.wait(30)
    assert p.status == "killed"
    first = p.read_output().delta
    assert "spawn failed: ENOENT" in first and "/nonexistent/dsh-bg" in first
    assert p.read_output().delta == ""


# registry (docs/registry.md) --------------------------------------------------

def test_registry_ids_owners_and_lookups(ex):
    a = ex.start(ex.resolve("echo hi", owner="session-a"))
    b = ex.start(ex.resolve("true"))
    assert (a.id, b.id) == ("bash-1", "bash-2")
    assert [p.id for p in ex.list()] == ["bash-1", "bash-2"]
    assert ex.owner_of("bash-1") == "session-a" and ex.owner_of("bash-2") is None
    assert a.owner == "session-a" and a.command == "echo hi"
    got = ex.get("bash-1")
    assert got is not None and got.id == "bash-1"
    assert ex.get("bash-99") is None
    a.wait(30)
    assert ex.read_output("bash-1").delta == "hi\n"
    assert ex.kill("bash-1") is False
    for call in (ex.owner_of, ex.read_output, ex.kill):
        with pytest.raises(NotFoundError) as info:
            call("bash-99")
        assert isinstance(info.value, KeyError) and "bash-99" in str(info.value)


def test_listeners_hear_each_completion_once_and_a_raising_one_is_reported(ex, monkeypatch):
    reported = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: reported.append(u.exc_value))

    def broken(p):
        raise RuntimeError("listener bug")

    heard = []
    ex.on_task_done(broken)
    ex.on_task_done(lambda p: heard.append((p.id, p.status)))
    counted = []
    unsubscribe = ex.on_task_done(lambda p: counted.append(p.id))
    procs = [ex.start(ex.resolve(f"exit {i}")) for i in range(4)]
    for p in procs:
        p.wait(30)
    # Listeners run on the callback thread, after each process settled.
    assert eventually(lambda: len(heard) == 4 and len(counted) == 4 and len(reported) == 4)
    assert sorted(heard) == [(f"bash-{i}", "completed") for i in range(1, 5)]
    assert all(isinstance(e, RuntimeError) for e in reported)
    assert unsubscribe() is True and unsubscribe() is False
    ex.start(ex.resolve("true")).wait(30)
    assert eventually(lambda: len(heard) == 5)
    ex.close()  # waits for every queued delivery
    assert len(counted) == 4 and len(heard) == 5


def test_close_kills_everything_and_no_listener_runs_after():
    ex = Executor(grace_ms=300)
    heard = []
    ex.on_task_done(lambda p: heard.append(p.id))
    p = ex.start(ex.resolve("trap '' TERM; echo $$; while :; do sleep 0.05; done"))
    pid = int(read_until(p, "\n").split()[0])
    with ex:
        pass
    assert p.done and p.status == "killed" and p.signal == "SIGKILL"
    assert not alive(pid)
    assert heard == []


@pytest.mark.parametrize("text", ["plain\n", "it's", "both ' and \"", "tab\tback\\slash\x01\x7f", "héllo 😀"])
def test_reprs_quote_text_as_python_does(ex, text):
    r = ex.run(ex.resolve("cat", stdin=text))
    assert r.stdout.text == text
    assert f"text={text!r}" in repr(r.stdout)
    p = ex.start(ex.resolve("cat", stdin=text))
    p.wait(30)
    assert f"delta={text!r}" in repr(p.read_output())
    assert repr(p).startswith("Process(id='bash-")


@pytest.mark.parametrize("command", [b"\xff\xfe", "a\udcff", 5, None])
def test_hostile_commands_are_refused_naming_the_field(ex, command):
    with pytest.raises(InvalidArgumentError) as info:
        ex.resolve(command)
    assert info.value.field == "request.command"


def test_invalid_utf8_stdin_bytes_pass_through_and_output_is_replaced(ex):
    r = ex.run(ex.resolve("cat", stdin=b"ok\xff\xfeend"))
    assert r.stdout.text == "ok\ufffd\ufffdend"


def test_unknown_ids_and_reads_after_close(ex):
    for bad in ["", "bash-0", "../x", "bash-1\0"]:
        assert ex.get(bad) is None
        with pytest.raises(NotFoundError):
            ex.kill(bad)
    p = ex.start(ex.resolve("echo bye"))
    p.wait(30)
    ex.close()
    assert p.read_output().delta == "bye\n"
    assert p.read_output().delta == ""
    assert p.kill() is False


def test_a_fractional_timeout_is_rounded_up_to_a_whole_millisecond(ex):
    # A model may write 1500.5; the harness accepts it, and so does every face.
    assert ex.resolve("true", timeout_ms=1500.5).timeout_ms == 1501


def test_reconfigure_changes_new_commands_and_a_bad_value_changes_nothing():
    with Executor(max_output_bytes=1000) as ex:
        ex.reconfigure(max_output_bytes=4, timeout_ms=900)
        spec = ex.resolve("printf abcdefgh")
        assert (spec.timeout_ms, spec.stdout_max_bytes) == (900, 4)
        assert ex.run(spec).stdout.text == "efgh"
        with pytest.raises(dsh_native.InvalidArgumentError) as err:
            ex.reconfigure(grace_ms=-1)
        assert err.value.field == "config.grace_ms"
        assert ex.resolve("true").timeout_ms == 900


# A str Python can hold but UTF-8 cannot encode: a lone surrogate (what
# os.fsdecode makes of bytes that are not UTF-8, or a stray "\ud800").
NOT_UTF8 = "is not encodable as UTF-8 (a lone surrogate"


@pytest.mark.parametrize(
    "call, field, needle",
    [
        (lambda ex: ex.resolve("true", env={"A": "\ud800"}), "request.env", "value of 'A' " + NOT_UTF8),
        (lambda ex: ex.resolve("true", env={"A": "x\udcff"}), "request.env", "'\\udcff' at index 1"),
        (lambda ex: ex.resolve("true", env={"\ud800": "v"}), "request.env", "key '\\ud800' " + NOT_UTF8),
        (lambda ex: ex.resolve("true", dsh_env={"DSH_A": "\ud800"}), "request.dsh_env", "value of 'DSH_A' " + NOT_UTF8),
        (lambda ex: ex.resolve("true", dsh_env={"DSH_\ud800": "v"}), "request.dsh_env", NOT_UTF8),
        (lambda ex: ex.resolve("echo \ud800"), "request.command", "request.command " + NOT_UTF8),
        (lambda ex: ex.resolve("true", owner="\ud800"), "request.owner", "request.owner " + NOT_UTF8),
        (lambda ex: ex.resolve("cat", stdin="\ud800"), "request.stdin", "request.stdin " + NOT_UTF8),
        (lambda ex: ex.resolve("true", on_expiry="kill\ud800"), "request.on_expiry", NOT_UTF8),
        (
            lambda ex: ex.resolve("true", sandbox_policy={"mode": "read-only", "session_id": "\ud800"}),
            "request.sandbox_policy",
            "session_id " + NOT_UTF8,
        ),
        (lambda ex: ex.resolve("true", sandbox_policy={"mode": "read-\ud800"}), "request.sandbox_policy", "mode " + NOT_UTF8),
        (lambda ex: ex.spawn_terminal(["echo", "\ud800"]), "request.argv", "item 1 " + NOT_UTF8),
        (lambda ex: ex.spawn_terminal(command="echo \ud800"), "request.command", NOT_UTF8),
        (lambda ex: ex.spawn_terminal(["true"], env={"A": "\ud800"}), "request.env", "value of 'A' " + NOT_UTF8),
        (lambda ex: ex.spawn_terminal(["true"], dsh_env={"DSH_A": "\ud800"}), "request.dsh_env", NOT_UTF8),
        (lambda ex: Executor(cwd="/\ud800"), "config.cwd", NOT_UTF8),
        (lambda ex: Executor(spill_dir="/\ud800"), "config.spill_dir", NOT_UTF8),
    ],
)
def test_a_lone_surrogate_is_refused_naming_the_field(ex, call, field, needle, transport):
    with pytest.raises(InvalidArgumentError) as info:
        call(ex)
    assert info.value.field == field
    assert needle in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_lone_surrogate_written_to_a_terminal_or_as_its_signal_is_refused_naming_the_argument(ex, transport):
    term = ex.spawn_terminal(["cat"])
    try:
        with pytest.raises(InvalidArgumentError) as info:
            term.write("a\ud800")
        assert info.value.field == "terminal.data" and NOT_UTF8 in str(info.value)
        with pytest.raises(InvalidArgumentError) as info:
            term.signal_foreground("SIG\ud800")
        assert info.value.field == "terminal.signal" and NOT_UTF8 in str(info.value)
    finally:
        term.terminate()


def test_a_wrong_type_in_env_says_which_key_and_what_it_got(ex):
    with pytest.raises(InvalidArgumentError) as info:
        ex.resolve("true", env={"A": 1})
    assert info.value.field == "request.env"
    assert "must be a dict of str to str, got int for 'A'" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        ex.resolve("true", dsh_env={5: "v"})
    assert "must be a dict of str to str, got key 5 of type int" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        ex.resolve("true", env=[("A", "1")])
    assert "must be a dict of str to str, got list" in str(info.value)
