"""The governor through the Python face (docs/limits.md, docs/sandbox.md):
limits from the executor and the request, the limit that ended a command,
how each limit was enforced, fail-closed, and the network policy. Every
risky command runs under a run timeout, so a limit that failed ends as a
timeout instead of a hang; the exhaustive cases are the Rust suite's."""

import os
import socket
import tempfile
import threading

import pytest

import dsh_native
from dsh_native import Executor, InvalidArgumentError, LimitUnavailableError, SandboxUnavailableError


def need(kind: str) -> None:
    if dsh_native.limits_support()[kind] == "unsupported":
        pytest.skip(f"this host cannot enforce the {kind} limit")


def test_limits_resolve_from_the_executor_clamped_and_named_when_bad() -> None:
    with Executor(limits={"processes": 50, "memory_bytes": 1 << 30}) as ex:
        assert ex.resolve("true").limits == {"memory_bytes": 1 << 30, "processes": 50}
        spec = ex.resolve("true", limits={"processes": 500, "cpu_seconds": 3})
        assert spec.limits == {"memory_bytes": 1 << 30, "processes": 50, "cpu_seconds": 3}
        with pytest.raises(InvalidArgumentError) as e:
            ex.resolve("true", limits={"cpu_seconds": 1.5})
        assert e.value.field == "request.limits.cpu_seconds"
        with pytest.raises(InvalidArgumentError, match='request.limits has an unknown key "memory"'):
            ex.resolve("true", limits={"memory": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="config.limits.open_files must be a positive"):
        Executor(limits={"open_files": 0})


def test_a_fork_bomb_ends_with_processes(ex: Executor) -> None:
    need("processes")
    bomb = (
        "g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); "
        '[ "$(cat /sys/fs/cgroup/pids$g/pids.max)" = 32 ] || exit 9; b() { b | b & }; b; wait'
    )
    r = ex.run(ex.resolve(bomb, limits={"processes": 32}, timeout_ms=60_000))
    assert r.limit == "processes"
    assert not r.timed_out and not r.aborted
    assert r.limits_enforcement == {"processes": "cgroup-v1"}


def test_a_memory_hog_ends_with_memory_in_the_background(ex: Executor) -> None:
    need("memory")
    p = ex.start(
        ex.resolve(
            "python3 -c 'x = bytearray(b\"\\x01\") * (512 << 20)'; sleep 30",
            limits={"memory_bytes": 64 << 20},
        )
    )
    p.wait(60)
    assert p.limit == "memory"
    assert p.status == "killed"
    assert p.limits_enforcement == {"memory": "cgroup-v1"}


def test_file_size_and_cpu_end_the_command_by_their_signal(ex: Executor) -> None:
    with tempfile.TemporaryDirectory() as d:
        r = ex.run(ex.resolve(f"exec yes > {d}/big", limits={"file_size_bytes": 4096}, timeout_ms=60_000))
        assert (r.limit, r.signal) == ("file_size", "SIGXFSZ")
        assert os.path.getsize(f"{d}/big") == 4096
    r = ex.run(ex.resolve("while :; do :; done", limits={"cpu_seconds": 1}, timeout_ms=60_000))
    assert (r.limit, r.signal, r.timed_out) == ("cpu", "SIGXCPU", False)
    r = ex.run(ex.resolve("ulimit -n", limits={"open_files": 64}))
    assert (r.stdout.text, r.limit) == ("64\n", None)


def test_a_limit_the_kernel_refuses_fails_closed(ex: Executor) -> None:
    with pytest.raises(LimitUnavailableError) as e:
        ex.run(ex.resolve("true", limits={"open_files": 1 << 40}))
    assert e.value.limit == "open_files"
    assert isinstance(e.value, RuntimeError)


def test_network_deny_refuses_tcp_and_keeps_unix_sockets_and_loopback_allows_127(ex: Executor) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    probe = (
        "python3 -c '\n"
        "import socket\n"
        "try:\n"
        f"    socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"tcp open\")\n"
        "except PermissionError: print(\"tcp denied\")\n"
        "a, b = socket.socketpair(); a.send(b\"u\"); print(b.recv(1).decode())\n"
        "'"
    )
    policy = {"mode": "danger-full-access", "network": "deny"}
    r = ex.run(ex.resolve(probe, sandbox_policy=policy))
    assert r.stdout.text == "tcp denied\nu\n", r.stderr.text
    assert r.sandbox is not None
    assert (r.sandbox.network, r.sandbox.network_enforcement) == ("deny", "full")
    assert ex.resolve("true", sandbox_policy=policy).sandbox_policy.network == "deny"  # type: ignore[union-attr]
    r = ex.run(ex.resolve(probe, sandbox_policy={"mode": "danger-full-access"}))
    assert r.stdout.text == "tcp open\nu\n"
    listener.close()
    loopback = {"mode": "read-only", "network": "loopback"}
    lo = socket.socket()
    lo.bind(("127.0.0.1", 0))
    lo.listen(1)
    lo_port = lo.getsockname()[1]
    probe = (
        "python3 -c '\n"
        "import socket\n"
        f"socket.create_connection((\"127.0.0.1\", {lo_port}), 5).close(); print(\"loopback ok\")\n"
        "try:\n"
        "    socket.create_connection((\"192.0.2.1\", 80), 5)\n"
        "except PermissionError: print(\"outside denied\")\n"
        "'"
    )
    try:
        r = ex.run(ex.resolve(probe, sandbox_policy=loopback))
    except SandboxUnavailableError as e:
        # Root and a cgroup v2 hierarchy are needed; without them it fails
        # closed, naming the policy.
        assert os.geteuid() != 0 or not os.access("/sys/fs/cgroup/unified/cgroup.procs", os.W_OK), e
        assert "loopback" in str(e)
    else:
        assert r.stdout.text == "loopback ok\noutside denied\n", r.stderr.text
        assert r.sandbox is not None
        assert (r.sandbox.network, r.sandbox.network_enforcement) == ("loopback", "full")
    lo.close()
    with pytest.raises(InvalidArgumentError, match='unknown network policy "lan"'):
        ex.resolve("true", sandbox_policy={"mode": "read-only", "network": "lan"})
