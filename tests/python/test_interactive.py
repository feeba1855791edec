"""Writable stdin (stdin=PIPE) and the timeout hand-over (on_expiry)."""

import asyncio
import errno
import os
import subprocess
import tempfile

import pytest

import dsh_native
from conftest import alive, eventually


def test_interleaved_writes_and_reads_with_cat(ex: dsh_native.Executor) -> None:
    p = ex.start(ex.resolve("cat", stdin=dsh_native.PIPE))
    assert p.has_stdin_pipe
    seen = []
    for i in range(10):
        line = f"line {i}\n"
        p.write_stdin(line)
        # A line may arrive in pieces: wait until the whole of it is back.
        assert eventually(lambda: seen.append(p.read_output().delta) or "".join(seen).endswith(line))
    assert p.close_stdin() is True
    assert p.close_stdin() is False
    p.wait(30)
    assert p.exit_code == 0
    assert "".join(seen) == "".join(f"line {i}\n" for i in range(10))


def test_close_gives_eof_to_wc_with_an_exact_count(ex: dsh_native.Executor) -> None:
    p = ex.start(ex.resolve("wc -c", stdin=subprocess.PIPE))
    data = os.urandom(3 * 1024 * 1024 + 5)
    p.write_stdin(data)
    p.close_stdin()
    p.wait(30)
    assert p.read_output().delta.strip() == str(len(data))


def test_several_mebibytes_arrive_byte_exact(ex: dsh_native.Executor) -> None:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        p = ex.start(ex.resolve(f"cat > '{out}'", stdin=dsh_native.PIPE))
        data = os.urandom(6 * 1024 * 1024)

        async def write() -> None:
            await p.write_stdin_async(data[: len(data) // 2])
            await p.write_stdin_async(data[len(data) // 2 :])

        asyncio.run(write())
        p.close_stdin()
        p.wait(30)
        with open(out, "rb") as f:
            assert f.read() == data


def test_a_slow_reader_applies_back_pressure_and_the_loop_stays_responsive(
    ex: dsh_native.Executor,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        gate, out = os.path.join(d, "gate"), os.path.join(d, "out")
        p = ex.start(
            ex.resolve(
                f"while [ ! -e '{gate}' ]; do sleep 0.01; done; cat > '{out}'",
                stdin=dsh_native.PIPE,
            )
        )
        data = b"z" * (8 * 1024 * 1024)

        async def scenario() -> None:
            write = asyncio.ensure_future(p.write_stdin_async(data))
            # The loop keeps running other work while the write waits.
            ticks = 0
            for _ in range(50):
                await asyncio.sleep(0)
                ticks += 1
            assert ticks == 50
            await asyncio.sleep(0.2)
            assert not write.done(), "the write finished although nobody read"
            with open(gate, "w"):
                pass
            await asyncio.wait_for(write, 30)

        asyncio.run(scenario())
        p.close_stdin()
        p.wait(30)
        assert os.path.getsize(out) == len(data)


def test_writes_after_exit_after_close_or_without_a_pipe_raise(ex: dsh_native.Executor) -> None:
    p = ex.start(ex.resolve("true", stdin=dsh_native.PIPE))
    p.wait(30)
    with pytest.raises(dsh_native.StdinClosedError) as info:
        p.write_stdin(b"late")
    assert isinstance(info.value, BrokenPipeError)
    assert info.value.errno == errno.EPIPE
    assert info.value.reason == "exited"
    assert info.value.id == p.id
    assert "has exited" in str(info.value)

    async def late() -> None:
        await p.write_stdin_async(b"late")

    with pytest.raises(dsh_native.StdinClosedError):
        asyncio.run(late())

    p = ex.start(ex.resolve("cat >/dev/null; sleep 30", stdin=dsh_native.PIPE))
    p.close_stdin()
    with pytest.raises(dsh_native.StdinClosedError) as info:
        p.write_stdin("x")
    assert info.value.reason == "closed"
    p.kill()

    p = ex.start(ex.resolve("sleep 30"))
    assert not p.has_stdin_pipe
    with pytest.raises(dsh_native.StdinClosedError) as info:
        p.write_stdin("x")
    assert info.value.reason == "not-piped"
    p.kill()

    p = ex.start(ex.resolve("exec 0<&-; echo closed; sleep 30", stdin=dsh_native.PIPE))
    assert eventually(lambda: "closed" in p.read_output().delta)
    with pytest.raises(dsh_native.StdinClosedError) as info:
        p.write_stdin(b"q" * (4 * 1024 * 1024))
    assert info.value.reason == "broken"
    assert p.status == "running"
    p.kill()


def test_bad_stdin_and_on_expiry_values_are_refused(ex: dsh_native.Executor) -> None:
    with pytest.raises(dsh_native.InvalidArgumentError) as info:
        ex.resolve("true", stdin=7)
    assert info.value.field == "request.stdin"
    with pytest.raises(dsh_native.InvalidArgumentError) as info:
        ex.resolve("true", on_expiry="later")
    assert info.value.field == "request.on_expiry"
    spec = ex.resolve("cat", stdin=dsh_native.PIPE)
    assert (spec.stdin, spec.stdin_pipe, spec.on_expiry) == (None, True, "kill")
    with pytest.raises(dsh_native.InvalidArgumentError) as info:
        ex.run(spec)
    assert info.value.field == "spec.stdin"
    p = ex.start(ex.resolve("true"))
    with pytest.raises(TypeError):
        p.write_stdin(5)  # type: ignore[arg-type]
    p.wait(30)


def counter(count: int) -> str:
    return f"for ((i=1;i<={count};i++)); do echo $i; if ((i%500==0)); then sleep 0.05; fi; done"


def test_a_handed_over_run_continues_without_loss_or_duplication() -> None:
    with dsh_native.Executor(max_output_bytes=1 << 20, grace_ms=300) as ex:
        count = 20_000
        r = ex.run(ex.resolve(counter(count), timeout_ms=200, on_expiry="background"))
        assert r.timed_out and not r.aborted
        assert (r.exit_code, r.signal) == (None, None)
        assert r.background_id is not None
        p = ex.get(r.background_id)
        assert p is not None and p.status == "running" or p.done
        p.wait(30)
        rest = p.read_output()
        assert not rest.lossy
        assert r.stdout.text + rest.delta == "".join(f"{i}\n" for i in range(1, count + 1))
        assert p.status == "completed" and p.exit_code == 0


def test_run_async_hands_over_a_prompt_to_answer(ex: dsh_native.Executor) -> None:
    async def scenario() -> str:
        spec = ex.resolve(
            'echo question; read -r a; echo "got $a"',
            timeout_ms=200,
            on_expiry="background",
            stdin=dsh_native.PIPE,
        )
        r = await ex.run_async(spec)
        assert r.stdout.text == "question\n"
        assert r.background_id is not None
        p = ex.get(r.background_id)
        assert p is not None
        await p.write_stdin_async("yes\n")
        await asyncio.wait_for(p.wait_async(), 30)
        return p.read_output().delta

    assert asyncio.run(scenario()) == "got yes\n"


def test_the_default_kills_and_close_ends_a_handed_over_process() -> None:
    ex = dsh_native.Executor(grace_ms=300)
    r = ex.run(ex.resolve("sleep 30", timeout_ms=100))
    assert r.timed_out and r.signal == "SIGTERM" and r.background_id is None
    r = ex.run(ex.resolve("echo $$; sleep 60 & wait", timeout_ms=100, on_expiry="background"))
    pid = int(r.stdout.text)
    assert r.background_id is not None
    p = ex.get(r.background_id)
    assert p is not None and alive(pid)
    ex.close()
    assert p.done and p.status == "killed"
    assert not alive(pid)


# ---- review: hostile cases ---------------------------------------------------


def _run_child(script: str, timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    """Runs ``script`` in a fresh interpreter, so a hang fails instead of
    hanging the suite and memory is measured alone."""
    import sys

    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )


def test_pending_async_writes_settle_on_close_kill_and_dispose() -> None:
    async def main() -> None:
        ex = dsh_native.Executor(grace_ms=300)
        big = b"p" * (4 * 1024 * 1024)
        # close_stdin while a write waits: the write still goes down whole
        # as the command reads, then EOF; a write made after it is refused.
        p = ex.start(ex.resolve("sleep 0.3; wc -c", stdin=dsh_native.PIPE))
        w = asyncio.ensure_future(p.write_stdin_async(big))
        await asyncio.sleep(0)
        assert p.close_stdin() is True
        with pytest.raises(dsh_native.StdinClosedError) as info:
            await asyncio.wait_for(p.write_stdin_async(b"late"), 30)
        assert info.value.reason == "closed"
        await asyncio.wait_for(w, 30)
        await asyncio.wait_for(p.wait_async(), 30)
        assert p.read_output().delta.strip() == str(len(big))
        # kill with writes waiting: they fail, the command having exited
        # (its exit closed its end of the pipe).
        p = ex.start(ex.resolve("sleep 60", stdin=dsh_native.PIPE))
        ws = [asyncio.ensure_future(p.write_stdin_async(big)) for _ in range(3)]
        await asyncio.sleep(0)
        p.kill()
        for w in ws:
            with pytest.raises(dsh_native.StdinClosedError) as info:
                await asyncio.wait_for(w, 30)
            assert info.value.reason == "exited"
        # dispose with writes waiting: they fail too, none hangs.
        p = ex.start(ex.resolve("sleep 60", stdin=dsh_native.PIPE))
        ws = [asyncio.ensure_future(p.write_stdin_async(big)) for _ in range(3)]
        await asyncio.sleep(0)
        ex.close()
        for w in ws:
            with pytest.raises(dsh_native.StdinClosedError):
                await asyncio.wait_for(w, 30)

    asyncio.run(main())


def test_ctrl_c_interrupts_a_blocked_write_stdin_and_the_process_lives_on() -> None:
    script = r"""
import os, signal, threading, dsh_native
ex = dsh_native.Executor(grace_ms=300)
p = ex.start(ex.resolve("sleep 60", stdin=dsh_native.PIPE))
interrupted = threading.Event()
def ctrl_c():
    # Until the main thread has seen it: the write blocks at some point.
    while not interrupted.wait(0.1):
        os.kill(os.getpid(), signal.SIGINT)
t = threading.Thread(target=ctrl_c)
t.start()
try:
    p.write_stdin(b"x" * (8 * 1024 * 1024))
    print("NOT INTERRUPTED")
except KeyboardInterrupt:
    interrupted.set()
    print("interrupted")
t.join()
assert p.status == "running", p.status
assert p.close_stdin() is True
p.kill()
p.wait(30)
ex.close()
print("ok")
"""
    r = _run_child(script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["interrupted", "ok"], r.stdout


def test_a_huge_blocking_write_is_not_copied_whole() -> None:
    # 256 MiB written by one call: the writer's memory stays within the
    # data itself plus a bounded amount, not a second copy of it.
    script = r"""
import resource, dsh_native
ex = dsh_native.Executor()
data = b"h" * (256 * 1024 * 1024)
p = ex.start(ex.resolve("cat >/dev/null", stdin=dsh_native.PIPE))
p.write_stdin(b"warm")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
p.write_stdin(data)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
p.close_stdin()
p.wait(60)
ex.close()
print((after - before) // (1024 * 1024))
"""
    r = _run_child(script)
    assert r.returncode == 0, r.stderr
    grew_mib = int(r.stdout.strip())
    assert grew_mib < 64, f"peak memory grew by {grew_mib} MiB for a 256 MiB write"


def test_close_stdin_from_another_thread_waits_for_a_blocking_write() -> None:
    # write_stdin blocks in many takes while the command does not read yet;
    # a close_stdin made meanwhile from another thread must wait for all of
    # it (before, the next take failed with 'closed' after a prefix went).
    import threading

    with dsh_native.Executor() as ex:
        big = b"q" * (2 << 20)
        p = ex.start(ex.resolve("sleep 0.5; wc -c", stdin=dsh_native.PIPE))
        failed: list = []
        tid: list = []

        def write() -> None:
            tid.append(threading.get_native_id())
            try:
                p.write_stdin(big)
            except BaseException as e:  # noqa: BLE001 - reported below
                failed.append(repr(e))

        t = threading.Thread(target=write)
        t.start()

        def blocked() -> bool:
            if not tid:
                return False
            with open(f"/proc/self/task/{tid[0]}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "S"

        assert eventually(blocked)
        assert p.close_stdin() is True
        t.join(60)
        assert not t.is_alive() and not failed, failed
        p.wait(60)
        assert p.read_output().delta.strip() == str(len(big))
