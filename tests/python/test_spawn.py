"""Executor.spawn (docs/spawn.md): argv never given to a shell, subprocess-like
stdio, offset reads, and a tree that outlives its leader until terminate()."""

import os
import subprocess
import sys
import threading

import pytest

import dsh_native
from dsh_native import DEVNULL, INHERIT, PIPE, Collect
from conftest import alive, eventually


def test_argv_is_never_given_to_a_shell(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["printf", "%s|", "$HOME", "a; echo b", "*"])
    s.wait(20)
    assert s.read_from("stdout").text == "$HOME|a; echo b|*|"
    assert (s.exit_code, s.signal, s.settled) == (0, None, True)
    assert s.pid > 0


def test_the_defaults_come_from_the_configuration(tmp_path) -> None:
    with dsh_native.Executor(cwd=str(tmp_path), max_output_bytes=10, grace_ms=300) as ex:
        s = ex.spawn(["bash", "-c", "pwd; seq 1 100"])
        s.wait(20)
        r = s.read_from("stdout")
        # A 10-byte window over the output, the whole of it in the spill file.
        assert (len(r.text), r.lossy) == (10, True)
        with open(r.spill_path) as f:
            assert f.read().startswith(f"{tmp_path}\n1\n2\n")
        assert s.stdin is None and s.stdout is None and s.stderr is None


def test_offset_reads_consume_nothing(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["seq", "1", "1000"], stdout=Collect(100, spill_max_bytes=None))
    s.wait(20)
    a, b = s.read_from("stdout"), s.read_from("stdout", 0)
    assert (a.text, a.next_offset, a.lossy) == (b.text, b.next_offset, b.lossy)
    assert a.lossy and a.spill_path is None and a.spill_error is None
    assert a.text.endswith("1000\n") and len(a.text) == 100
    end = s.read_from("stdout", a.next_offset)
    assert (end.text, end.next_offset) == ("", a.next_offset)


def test_raw_pipes_carry_binary_both_ways(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["cat"], stdin=PIPE, stdout=PIPE)
    data = bytes(range(256)) * 8192
    writer = threading.Thread(target=lambda: (s.stdin.write(data), s.stdin.close()))
    writer.start()
    got = s.stdout.read()
    writer.join()
    s.wait(20)
    assert got == data and s.exit_code == 0
    assert s.read_from("stdout").text == ""


def test_stdin_bytes_and_text_are_written_then_closed(ex: dsh_native.Executor) -> None:
    for data, size in [(b"\0" * 100_000, "100000"), ("é" * 10, "20")]:
        s = ex.spawn(["wc", "-c"], stdin=data)
        s.wait(20)
        assert s.read_from("stdout").text.strip() == size


def test_inherit_shares_the_hosts_descriptors() -> None:
    code = (
        "import dsh_native, sys\n"
        "with dsh_native.Executor() as ex:\n"
        "    s = ex.spawn(['bash', '-c', 'echo out; echo err >&2'], stdout=dsh_native.INHERIT, stderr=dsh_native.INHERIT)\n"
        "    s.wait(20)\n"
        "    print('host', flush=True)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out\nhost\n", "err\n")


@pytest.mark.parametrize("fd", [0, 1, 2])
def test_inheriting_a_closed_descriptor_is_an_error_never_one_of_ours(fd: int) -> None:
    # A host whose own fd is closed: the executor's descriptors (Landlock
    # rulesets, pidfds, memfds) must never take that number and be handed
    # to the program as its stream.
    stream = ["stdin", "stdout", "stderr"][fd]
    code = (
        "import dsh_native, os, sys\n"
        "log = os.fdopen(os.dup(2), 'w', buffering=1)\n"
        "with dsh_native.Executor() as ex:\n"
        f"    os.close({fd})\n"
        "    for _ in range(3):\n"
        "        try:\n"
        f"            s = ex.spawn(['bash', '-c', 'readlink /proc/$$/fd/{fd} >/tmp/dsh-inherit-closed-$PPID'], {stream}=dsh_native.INHERIT)\n"
        "            s.wait(20)\n"
        "            log.write('ran\\n')\n"
        "        except dsh_native.SpawnError as e:\n"
        "            log.write(f'refused {e.errno} {e}\\n')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith("refused 9 ") for line in lines), r.stderr
    assert all(f"fd {fd}" in line and stream in line for line in lines), r.stderr


def test_standard_descriptors_closed_before_the_executor_are_never_handed_over() -> None:
    # Closed before the executor exists: its long-lived descriptors (the
    # /proc it keeps, its reactor's) are made then, and must not take 0-2.
    code = (
        "import dsh_native, os\n"
        "log = os.fdopen(os.dup(2), 'w', buffering=1)\n"
        "for fd in (0, 1, 2):\n"
        "    os.close(fd)\n"
        "with dsh_native.Executor() as ex:\n"
        "    ex.spawn(['true']).wait(20)\n"
        "    for stream in ('stdin', 'stdout', 'stderr'):\n"
        "        try:\n"
        "            ex.spawn(['true'], **{stream: dsh_native.INHERIT}).wait(20)\n"
        "            log.write(f'{stream} ran\\n')\n"
        "        except dsh_native.SpawnError as e:\n"
        "            log.write(f'{stream} refused {e.errno}\\n')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["stdin refused 9", "stdout refused 9", "stderr refused 9"], r.stderr


def test_the_environment_is_scrubbed_then_changed(ex: dsh_native.Executor, monkeypatch) -> None:
    monkeypatch.setenv("SPAWN_PY_PLAIN", "plain")
    monkeypatch.setenv("SPAWN_PY_TOKEN", "secret")
    monkeypatch.setenv("SPAWN_PY_REMOVED", "x")
    s = ex.spawn(["env"], env={"SPAWN_PY_REMOVED": None, "SPAWN_PY_GIVEN_KEY": "given"})
    s.wait(20)
    env = dict(line.split("=", 1) for line in s.read_from("stdout").text.splitlines() if "=" in line)
    assert env.get("SPAWN_PY_PLAIN") == "plain"
    assert env.get("SPAWN_PY_GIVEN_KEY") == "given"
    assert "SPAWN_PY_TOKEN" not in env and "SPAWN_PY_REMOVED" not in env


def test_a_timeout_stops_the_tree_and_says_so(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["bash", "-c", "trap 'echo term; exit 143' TERM; echo ready; while :; do sleep 0.05; done"], timeout_ms=300)
    s.wait(20)
    assert (s.timed_out, s.exit_code) == (True, 143)
    assert "term" in s.read_from("stdout").text
    quick = ex.spawn(["true"], timeout_ms=20_000)
    quick.wait(20)
    assert (quick.timed_out, quick.exit_code) == (False, 0)
    with pytest.raises(dsh_native.InvalidArgumentError, match="timeout_ms"):
        ex.spawn(["true"], timeout_ms=0)


def test_the_tree_outlives_the_leader_until_terminate(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["bash", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"])
    s.wait(20)
    grandchild = int(s.read_from("stdout").text)
    assert eventually(lambda: alive(grandchild))
    assert not s.tree_gone
    with pytest.raises(TimeoutError):
        s.wait_tree(0.3)
    s.terminate()
    s.wait_tree(20)
    assert not alive(grandchild) and s.tree_gone


def test_terminate_escalates_after_the_grace(ex: dsh_native.Executor) -> None:
    s = ex.spawn(["bash", "-c", "trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done"])
    assert eventually(lambda: "ready" in s.read_from("stdout").text)
    s.terminate()
    s.wait(20)
    assert s.signal == "SIGKILL" and "term" in s.read_from("stdout").text


def test_a_program_that_cannot_start_raises(ex: dsh_native.Executor, tmp_path) -> None:
    with pytest.raises(dsh_native.SpawnError) as e:
        ex.spawn(["no-such-program-dsh"])
    assert e.value.errno == 2
    with pytest.raises(dsh_native.SpawnError):
        ex.spawn(["true"], cwd=str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"argv": "true"}, "spawn.argv"),
        ({"argv": []}, "spawn.argv"),
        ({"argv": ["true"], "stdout": "x"}, "spawn.stdout"),
        ({"argv": ["true"], "stderr": DEVNULL}, "spawn.stderr"),
        ({"argv": ["true"], "stdin": 1.5}, "spawn.stdin"),
        ({"argv": ["true"], "grace_ms": 0}, "spawn.grace_ms"),
        ({"argv": ["true"], "env": {"A": 1}}, "spawn.env"),
    ],
)
def test_bad_arguments_name_the_field(ex: dsh_native.Executor, kwargs, field) -> None:
    argv = kwargs.pop("argv")
    with pytest.raises(dsh_native.InvalidArgumentError) as e:
        ex.spawn(argv, **kwargs)
    assert e.value.field == field


@pytest.mark.parametrize(
    "args, kwargs, error, name",
    [
        ((-1,), {}, ValueError, "max_bytes"),
        ((1.5,), {}, TypeError, "max_bytes"),
        ((True,), {}, TypeError, "max_bytes"),
        (("10",), {}, TypeError, "max_bytes"),
        ((10,), {"spill_max_bytes": -5}, ValueError, "spill_max_bytes"),
        ((10,), {"spill_max_bytes": 2.0}, TypeError, "spill_max_bytes"),
        ((1 << 70,), {}, ValueError, "max_bytes"),
    ],
)
def test_a_bad_collect_size_names_the_parameter(args, kwargs, error, name) -> None:
    with pytest.raises(error) as e:
        Collect(*args, **kwargs)
    assert f"Collect: {name} " in str(e.value)


def test_collect_takes_what_operator_index_takes() -> None:
    class Size:
        """An integer type of another library (numpy's int64, say)."""

        def __index__(self) -> int:
            return 4096

    c = Collect(Size(), spill_max_bytes=Size())
    assert (c.max_bytes, c.spill_max_bytes) == (4096, 4096)
    with pytest.raises(ValueError, match="must be 0 or more"):
        Collect(-1)
    with pytest.raises(ValueError, match="must be at most"):
        Collect(1 << 70)


def test_collect_needs_a_window_for_a_spill_cap() -> None:
    with pytest.raises(ValueError):
        Collect(spill_max_bytes=10)
    assert repr(Collect(5)) == "Collect(max_bytes=5, spill_max_bytes=None)"


def test_close_ends_what_was_spawned() -> None:
    ex = dsh_native.Executor(grace_ms=300)
    s = ex.spawn(["sleep", "300"], stdin=INHERIT)
    ex.close()
    assert s.settled and s.signal == "SIGTERM"
    assert eventually(lambda: not alive(s.pid))


def test_a_program_ends_with_the_executor_nobody_keeps() -> None:
    # The handle does not keep its executor (docs/faces.md): collected, the
    # executor is disposed, and its program with it.
    import gc

    s = dsh_native.Executor(grace_ms=300).spawn(["sleep", "300"])
    gc.collect()
    s.wait(30)
    assert (s.exit_code, s.signal) == (None, "SIGTERM")


def test_the_limit_that_ended_a_program_is_said(ex: dsh_native.Executor, tmp_path) -> None:
    s = ex.spawn(["sh", "-c", f"exec yes > {tmp_path}/big"], limits={"file_size_bytes": 4096})
    s.wait(30)
    assert (s.signal, s.limit) == ("SIGXFSZ", "file_size")
    assert s.limits_enforcement == {"file_size": "rlimit"}
    quiet = ex.spawn(["true"])
    quiet.wait(30)
    assert (quiet.limit, quiet.limits_enforcement) == (None, {})
