"""Two remote executors in one host (docs/remote.md, "Two hosts in one
harness"): each has its transport, its far-side executor and its registry,
so ids repeat, configuration is each one's own, and ending one (disposing
it, or losing its connection) leaves the other's processes running."""

from __future__ import annotations

import os
import shlex
import signal
import tempfile
from typing import Iterator, List, Tuple

import pytest

from dsh_native import DisposedError
from dsh_native.remote import Executor, Process, TransportError

from conftest import alive, eventually, need_dsh_bin
from sshd_server import Sshd


@pytest.fixture
def hosts(sshd: Sshd) -> Iterator[Tuple[Executor, Executor, str]]:
    """One executor over a pipe to `dsh serve --stdio`, one over ssh (whose
    client writes its pid to the file named third): two hosts, each with a
    workdir of its own."""
    dsh = need_dsh_bin()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        ssh_pid = os.path.join(b, "ssh.pid")
        wrapped = ["sh", "-c", f'echo $$ > {shlex.quote(ssh_pid)}; exec "$@"', "sh", *sshd.serve_command(dsh)]
        build = Executor([dsh, "serve", "--stdio"], cwd=a, grace_ms=300)
        test = Executor(wrapped, cwd=b, grace_ms=300, reconnect=False)
        try:
            yield build, test, ssh_pid
        finally:
            build.close()
            test.close()


def first_line(p: Process) -> str:
    """The process's output up to its first newline, once it came."""
    seen: List[str] = []

    def got() -> bool:
        seen.append(p.read_output().delta)
        return "\n" in "".join(seen)

    assert eventually(got), f"no line from {p.id}: {''.join(seen)!r}"
    return "".join(seen).split("\n")[0]


def pid_of(ex: Executor, command: str) -> int:
    """Starts `command` after printing its shell's pid; returns that pid."""
    p = ex.start(ex.resolve(f"echo $$; exec {command}"))
    return int(first_line(p))


def test_each_host_has_its_own_registry_and_configuration(hosts: Tuple[Executor, Executor, str]) -> None:
    build, test, _ = hosts
    a = build.start(build.resolve("pwd; sleep 30"))
    b = test.start(test.resolve("pwd; sleep 30"))
    assert a.id == b.id == "bash-1", "ids are per executor"
    assert first_line(a) != first_line(b), "both ran in one workdir"
    assert [p.id for p in build.list()] == [p.id for p in test.list()] == ["bash-1"]
    build.kill("bash-1")
    a.wait(20)
    assert a.status == "killed"
    other = test.get("bash-1")
    assert other is not None and other.status == "running", "a kill on one host reached the other"
    test.kill("bash-1")


def test_ending_one_host_leaves_the_other_running(hosts: Tuple[Executor, Executor, str]) -> None:
    build, test, _ = hosts
    gone = pid_of(build, "sleep 300")
    stays = pid_of(test, "sleep 300")
    build.close()
    assert eventually(lambda: not alive(gone)), "the closed host's process outlived it"
    assert alive(stays)
    assert test.run(test.resolve("echo still here")).stdout.text == "still here\n"
    # The closed one refuses, as a disposed local executor does.
    with pytest.raises((DisposedError, TransportError)):
        build.run(build.resolve("true"))


def test_a_lost_connection_to_one_host_leaves_the_other_running(hosts: Tuple[Executor, Executor, str]) -> None:
    build, test, ssh_pid = hosts
    dropped = pid_of(test, "sleep 300")
    stays = pid_of(build, "sleep 300")
    # The ssh client of the second host dies: its far side ends everything.
    with open(ssh_pid) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    assert eventually(lambda: not alive(dropped)), "the dropped host's process outlived its connection"
    assert alive(stays)
    assert build.run(build.resolve("echo fine")).stdout.text == "fine\n"
