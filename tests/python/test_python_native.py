"""What makes the binding feel native: threads, asyncio, Ctrl-C."""

import asyncio
import os
import signal
import threading
import time

import pytest

import dsh_native
from dsh_native import CancelToken, Executor

from conftest import alive, eventually, until


def test_run_releases_the_gil(ex):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    before = len(ticks)
    ex.run(ex.resolve("sleep 0.5"))
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during >= 10, f"only {during} ticks ran while the command did"


def test_runs_from_many_threads_at_once(ex):
    results = {}

    def worker(n):
        results[n] = ex.run(ex.resolve(f"echo {n}")).stdout.text

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {n: f"{n}\n" for n in range(16)}


def test_run_async_does_not_block_the_loop(ex):
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        results = await asyncio.gather(*(ex.run_async(ex.resolve(f"sleep 0.3; echo {i}")) for i in range(5)))
        t.cancel()
        return ticks, [r.stdout.text for r in results]

    ticks, outs = asyncio.run(main())
    assert outs == [f"{i}\n" for i in range(5)]
    assert ticks >= 10


def test_cancelling_the_awaiting_task_aborts_the_command(ex, tmp):
    pidfile = os.path.join(tmp, "pid")

    async def main():
        task = asyncio.ensure_future(ex.run_async(ex.resolve(f"echo $$ > {pidfile}; exec sleep 30")))
        await until(lambda: os.path.exists(pidfile) and open(pidfile).read().strip() != "")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    pid = int(open(pidfile).read())
    assert not alive(pid), "the command outlived the cancelled task"


def test_run_async_with_a_token_returns_the_aborted_result(ex, tmp):
    mark = os.path.join(tmp, "started")

    async def main():
        token = CancelToken()
        task = asyncio.ensure_future(ex.run_async(ex.resolve(f"touch {mark}; sleep 30"), cancel=token))
        await until(lambda: os.path.exists(mark))
        token.cancel()
        return await task

    r = asyncio.run(main())
    assert r.aborted and not r.timed_out and r.signal == "SIGTERM"


def test_run_async_raises_spawn_errors(ex):
    async def main():
        await ex.run_async(ex.resolve("true", workdir="/nonexistent"))

    with pytest.raises(OSError):
        asyncio.run(main())


def test_wait_async(ex):
    async def main():
        p = ex.start(ex.resolve("sleep 0.2; exit 4"))
        await asyncio.wait_for(p.wait_async(), 30)
        await p.wait_async()
        return p

    p = asyncio.run(main())
    assert (p.status, p.exit_code) == ("completed", 4)


def test_ctrl_c_during_run_aborts_the_command_and_leaves_nothing(ex, tmp):
    pidfile = os.path.join(tmp, "pid")

    def press_ctrl_c():
        eventually(lambda: os.path.exists(pidfile) and open(pidfile).read().strip() != "")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c).start()
    with pytest.raises(KeyboardInterrupt):
        ex.run(ex.resolve(f"echo $$ > {pidfile}; exec sleep 30"))
    pid = int(open(pidfile).read())
    assert not alive(pid), "Ctrl-C left the command running"


def test_ctrl_c_during_wait_is_delivered(ex):
    p = ex.start(ex.resolve("sleep 30"))
    main_tid = threading.main_thread().native_id

    def main_thread_sleeps() -> bool:
        with open(f"/proc/self/task/{main_tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "S"

    def press_ctrl_c_once_blocked():
        # Blocked in wait(), with the GIL released; at worst (blocked on the
        # GIL just before it) Ctrl-C lands before wait() and still raises.
        eventually(main_thread_sleeps)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c_once_blocked).start()
    with pytest.raises(KeyboardInterrupt):
        p.wait()
    assert p.kill()


def test_listener_runs_while_main_thread_blocks_in_close():
    ex = Executor(grace_ms=300)
    heard = []
    ex.on_task_done(lambda p: heard.append(p.id))
    ex.start(ex.resolve("true")).wait(30)
    ex.close()  # would deadlock if close held the GIL while a listener needs it
    assert heard == ["bash-1"]


def test_wait_with_an_enormous_timeout_is_no_deadline(ex):
    p = ex.start(ex.resolve("exit 2"))
    p.wait(timeout=1e300)
    assert p.exit_code == 2
    with pytest.raises(ValueError):
        p.wait(timeout=float("nan"))


def test_on_task_done_refuses_a_non_callable_at_once(ex):
    with pytest.raises(TypeError, match="callable"):
        ex.on_task_done(5)  # type: ignore[arg-type]


def test_owner_of_an_unknown_id_is_not_found(ex):
    with pytest.raises(dsh_native.NotFoundError):
        ex.owner_of("bash-99")


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.parametrize("kind", ["process", "terminal"])
def test_polling_with_wait_for_keeps_nothing(kind: str) -> None:
    # A future given up by asyncio.wait_for withdraws its callback: a host
    # that polls a long-running program keeps no memory per poll (before
    # the fix a terminal kept ~200 bytes each, all fired at the exit).
    with Executor() as ex:
        waited = ex.start(ex.resolve("sleep 60")) if kind == "process" else ex.spawn_terminal(argv=["sleep", "60"])

        async def poll(times: int) -> None:
            for _ in range(times):
                try:
                    await asyncio.wait_for(waited.wait_async(), 0)
                except asyncio.TimeoutError:
                    pass

        asyncio.run(poll(5_000))  # allocator warm-up
        before = _rss()
        asyncio.run(poll(40_000))
        grown = _rss() - before
        assert grown < (2 << 20), f"{grown} bytes kept by 40 000 given-up polls"


def test_a_misspelt_sandbox_policy_key_is_refused_not_ignored() -> None:
    # Ignored, `netwrok` left the network open under a policy meant to deny it.
    with Executor() as ex:
        bad = {"mode": "danger-full-access", "netwrok": "deny"}
        with pytest.raises(dsh_native.InvalidArgumentError, match='unknown key "netwrok"') as e:
            ex.resolve("true", sandbox_policy=bad)
        assert e.value.field == "request.sandbox_policy"
        with pytest.raises(dsh_native.InvalidArgumentError, match='unknown key "netwrok"'):
            ex.spawn(["true"], sandbox_policy=bad)
        with pytest.raises(dsh_native.InvalidArgumentError, match='unknown key "netwrok"'):
            ex.spawn_terminal(argv=["true"], sandbox_policy=bad)
        assert ex.resolve("true", sandbox_policy={"mode": "danger-full-access", "network": "deny"}).sandbox_policy.network == "deny"


def test_env_and_policy_take_any_mapping_as_the_stubs_say() -> None:
    import collections
    import types

    with Executor() as ex:
        env = types.MappingProxyType({"GREETING": "hi"})
        assert ex.run(ex.resolve("echo $GREETING", env=env)).stdout.text == "hi\n"
        chain = collections.ChainMap({"GREETING": "hello"}, {"OTHER": "x"})
        assert ex.run(ex.resolve("echo $GREETING $OTHER", env=chain)).stdout.text == "hello x\n"
        spawned = ex.spawn(["sh", "-c", "echo $GREETING"], env=env, stdout=dsh_native.Collect(1000))
        spawned.wait(30)
        assert spawned.read_from("stdout", 0).text == "hi\n"
        policy = types.MappingProxyType({"mode": "danger-full-access", "network": "deny"})
        assert ex.resolve("true", sandbox_policy=policy).sandbox_policy.network == "deny"
        with pytest.raises(dsh_native.InvalidArgumentError, match="must be a dict of str to str, got list"):
            ex.resolve("true", env=[("A", "B")])  # type: ignore[arg-type]


def test_an_infinite_timeout_is_no_limit_as_a_huge_one_is() -> None:
    import math

    with Executor() as ex:
        p = ex.start(ex.resolve("echo done"))
        p.wait(math.inf)
        assert p.exit_code == 0
        term = ex.spawn_terminal(argv=["sh", "-c", "echo hi"])
        term.wait(math.inf)
        with pytest.raises(ValueError, match="got NaN"):
            p.wait(math.nan)
        with pytest.raises(ValueError, match="got -1"):
            p.wait(-1)
