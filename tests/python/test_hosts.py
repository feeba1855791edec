"""Hostile Python hosts. Each scenario is a small script run in a fresh
interpreter with a timeout, so a hang fails the test instead of hanging the
suite: the host forks after use, ignores SIGCHLD, reaps with waitpid(-1),
rewrites os.environ while commands start, owns a terminal, and blocks inside
callbacks."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import alive, live_pids

LIMIT = 90


def host(script: str, limit: float = LIMIT) -> str:
    """Runs `script` in a new interpreter; returns its stdout, failing on a
    nonzero exit or a hang."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the host hung: {e.stdout!r} {e.stderr!r}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_fork_after_use_child_works_and_exits_and_parent_is_unaffected() -> None:
    out = host(
        """
        import os, sys, dsh_native
        ex = dsh_native.Executor(grace_ms=300)
        assert ex.run(ex.resolve("echo parent")).stdout.text == "parent\\n"
        bg = ex.start(ex.resolve("sleep 60"))
        sp = ex.spawn(["sleep", "60"])
        pid = os.fork()
        if pid == 0:
            try:
                try:
                    ex.run(ex.resolve("echo x"))
                    raise SystemExit("the parent's executor ran in the child")
                except dsh_native.ForkedChildError:
                    pass
                try:
                    sp.terminate()
                    raise SystemExit("terminated the parent's spawned program")
                except dsh_native.ForkedChildError:
                    pass
                try:
                    bg.wait(timeout=5)
                    raise SystemExit("waited for the parent's process")
                except dsh_native.ForkedChildError:
                    pass
                with dsh_native.Executor() as fresh:
                    assert fresh.run(fresh.resolve("echo child")).stdout.text == "child\\n"
                    p = fresh.start(fresh.resolve("exit 6"))
                    p.wait(timeout=30)
                    assert p.exit_code == 6
                import asyncio
                async def main():
                    with dsh_native.Executor() as a:
                        r = await a.run_async(a.resolve("echo async"))
                        assert r.stdout.text == "async\\n"
                asyncio.run(main())
            except BaseException as e:
                print("child failed:", repr(e), flush=True)
                os._exit(1)
            # A normal exit: the at-exit close of the parent's executor must
            # neither hang nor touch the parent's commands.
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert bg.status == "running", bg.status
        assert sp.exit_code is None and not sp.tree_gone, "the child ended the spawned program"
        sp.terminate()
        sp.wait(timeout=30)
        assert ex.run(ex.resolve("echo after")).stdout.text == "after\\n"
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_multiprocessing_fork_workers_use_dsh() -> None:
    out = host(
        """
        import multiprocessing as mp, dsh_native
        ex = dsh_native.Executor()
        ex.run(ex.resolve("true"))

        def work(i):
            with dsh_native.Executor() as e:
                return e.run(e.resolve(f"echo {i}")).stdout.text.strip()

        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                print(",".join(pool.map(work, range(6))))
        """
    )
    assert out.strip() == "0,1,2,3,4,5"


def test_sigchld_ignored_runs_are_results_with_output() -> None:
    out = host(
        """
        import signal, dsh_native
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        with dsh_native.Executor() as ex:
            for _ in range(20):
                r = ex.run(ex.resolve("echo out; exit 3"))
                assert r.stdout.text == "out\\n"
                assert r.exit_code == 3 or (r.exit_code is None and r.exit_status_unavailable), r
            ps = [ex.start(ex.resolve(f"echo {i}; exit {i}")) for i in range(20)]
            for i, p in enumerate(ps):
                p.wait(timeout=30)
                assert p.status == "completed", (p, p.read_output())
                assert p.read_output().delta == f"{i}\\n"
                assert p.exit_code == i or p.exit_status_unavailable
        print("ok")
        """
    )
    assert out.strip() == "ok"


def rewriting_the_environment(pop_every: int) -> str:
    """A host script's start: an executor `ex`, and two threads that set
    and unset variables until `stop` is set (the rest joins `threads`)."""
    return textwrap.dedent(
        f"""
        import os, threading, dsh_native
        ex = dsh_native.Executor()
        stop = False

        def churn():
            i = 0
            while not stop:
                os.environ[f"DSH_HOST_FILL_{{i % 300}}"] = "x" * (i % 97)
                if i % {pop_every} == 0:
                    os.environ.pop(f"DSH_HOST_FILL_{{(i * 3) % 300}}", None)
                i += 1

        threads = [threading.Thread(target=churn) for _ in range(2)]
        for t in threads:
            t.start()
        """
    )


def test_environment_rewritten_while_commands_start() -> None:
    out = host(
        rewriting_the_environment(pop_every=7)
        + textwrap.dedent(
            """
        try:
            ps = []
            for i in range(300):
                os.environ["HOST_MARKER"] = str(i)
                ps.append((i, ex.start(ex.resolve("echo $HOST_MARKER"))))
                if i % 20 == 0:
                    ex.run(ex.resolve("true"))
        finally:
            stop = True
            for t in threads:
                t.join()
        for i, p in ps:
            p.wait(timeout=60)
        print(sum(1 for i, p in ps if p.read_output().delta.strip().isdigit()))
        ex.close()
            """
        )
    )
    assert out.strip() == "300"


def test_environment_rewritten_while_foreground_runs_start() -> None:
    # `run` waits with the GIL released; the environment must be read
    # before that, while other threads can still not touch it.
    out = host(
        rewriting_the_environment(pop_every=5)
        + textwrap.dedent(
            """
        seen = 0
        try:
            spec = ex.resolve("echo $HOST_MARKER")
            for i in range(400):
                os.environ["HOST_MARKER"] = str(i)
                seen += ex.run(spec).stdout.text == f"{i}\\n"
        finally:
            stop = True
            for t in threads:
                t.join()
        print(seen)
        ex.close()
            """
        )
    )
    assert out.strip() == "400"


def test_commands_have_no_controlling_terminal_in_a_terminal_host() -> None:
    script = textwrap.dedent(
        """
        import os, time, dsh_native
        assert os.isatty(0)
        with dsh_native.Executor() as ex:
            t = time.monotonic()
            r = ex.run(ex.resolve("read -r x < /dev/tty; echo rc=$?; tty", timeout_ms=30_000))
            assert not r.timed_out, r
            assert r.stdout.text == "rc=1\\nnot a tty\\n", r
            assert time.monotonic() - t < 20
        print("tty-ok")
        """
    )
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", script])
    out = b""
    end = time.monotonic() + LIMIT
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    assert b"tty-ok" in out, out
    assert os.waitstatus_to_exitcode(status) == 0


def test_blocking_inside_callbacks_is_settled_or_refused_never_frozen() -> None:
    out = host(
        """
        import threading, time, dsh_native
        ex = dsh_native.Executor(grace_ms=300)
        other = ex.start(ex.resolve("sleep 60"))
        seen = []
        done = threading.Event()

        def cb(p):
            if p.id == other.id:
                return
            t = time.monotonic()
            seen.append(p.done)
            p.wait()                # settled: returns at once
            p.wait(timeout=60)
            for call in (lambda: ex.run(ex.resolve("true")),
                         lambda: other.wait(),
                         lambda: other.wait(timeout=60),
                         lambda: ex.close()):
                try:
                    call()
                    seen.append("no error")
                except dsh_native.BlockingCallError:
                    seen.append("refused")
            seen.append(time.monotonic() - t < 10)
            done.set()

        ex.on_task_done(cb)
        for _ in range(3):
            done.clear()
            ex.start(ex.resolve("true"))
            assert done.wait(30), "the callback ran"
        # Nothing froze: another executor still runs commands.
        with dsh_native.Executor() as other_ex:
            assert other_ex.run(other_ex.resolve("echo fine")).stdout.text == "fine\\n"
        ex.close()
        print(seen[:6])
        """
    )
    assert out.strip() == "[True, 'refused', 'refused', 'refused', 'refused', True]"


# --------------------------------------------------------------- host death

PLANT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "plant-escapes.sh")
ROUTES = ["setsid", "double", "nohup", "trapper", "envorphan", "envsetsid", "forkloop", "leader"]
PLACES = ["finished", "background", "foreground"]

# The host: plants every escape (tests/shared/plant-escapes.sh) from a
# command that already exited, a background process and a foreground run in
# progress, says "ready", and on a line from the test ends as told: "exit"
# (sys.exit: the interpreter's at-exit close runs) or "thread-exit"
# (os._exit from another thread: nothing runs); "sigkill" waits for it.
DEATH_HOST = """
import os, sys, threading, time, dsh_native
where, plant, ending = sys.argv[1], sys.argv[2], sys.argv[3]
ex = dsh_native.Executor(grace_ms=300)
def command(place, end):
    return f"mkdir -p {where}/{place} && . {plant} {where}/{place}; {end}"
assert ex.run(ex.resolve(command("finished", "exit 0"))).exit_code == 0
ex.start(ex.resolve(command("background", "exec sleep 300")))
fg = ex.resolve(command("foreground", "exec sleep 300"), timeout_ms=600_000)
threading.Thread(target=lambda: ex.run(fg), daemon=True).start()
routes = %r
deadline = time.monotonic() + 60
while not all(os.path.exists(f"{where}/{p}/{r}") and os.path.getsize(f"{where}/{p}/{r}")
              for p in ("finished", "background", "foreground") for r in routes):
    assert time.monotonic() < deadline, "not every escape was planted"
    time.sleep(0.01)
print("ready", flush=True)
sys.stdin.readline()
if ending == "exit":
    sys.exit(0)
if ending == "thread-exit":
    threading.Thread(target=lambda: os._exit(0)).start()
threading.Event().wait()
""" % (ROUTES,)


def _marked(mark: str) -> list[int]:
    """Live processes carrying HOST_DEATH_MARK=mark (all the host's commands
    started except the env -i ones)."""
    want = f"HOST_DEATH_MARK={mark}".encode()
    return live_pids("environ", lambda env: want in env)


def _die_with_the_test() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


@pytest.mark.parametrize("ending", ["sigkill", "exit", "thread-exit"])
def test_host_death_leaves_no_process_of_its_commands(ending: str, tmp_path: "os.PathLike[str]") -> None:
    mark = f"py-{os.getpid()}-{ending}"
    host_proc = subprocess.Popen(
        [sys.executable, "-c", DEATH_HOST, str(tmp_path), PLANT, ending],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, HOST_DEATH_MARK=mark),
        preexec_fn=_die_with_the_test,
    )
    pids: list[int] = []
    try:
        assert host_proc.stdout is not None and host_proc.stdin is not None
        ready, _, _ = select.select([host_proc.stdout], [], [], LIMIT)
        assert ready and host_proc.stdout.readline().strip() == "ready", "the host failed before planting"
        for place in PLACES:
            for route in ROUTES:
                if (place, route) == ("finished", "leader"):
                    continue  # it exited
                with open(os.path.join(tmp_path, place, route)) as f:
                    pids.append(int(f.read()))
        assert all(alive(p) for p in pids), pids
        if ending == "sigkill":
            host_proc.kill()
            died = time.monotonic()
            host_proc.wait(timeout=LIMIT)
        else:
            host_proc.stdin.write("go\n")
            host_proc.stdin.flush()
            assert host_proc.wait(timeout=LIMIT) == 0
            died = time.monotonic()

        def left() -> list[int]:
            return [p for p in pids if alive(p)] + _marked(mark)

        while left() and time.monotonic() - died < 10:
            time.sleep(0.01)
        took = time.monotonic() - died
        assert not left(), f"survived the host's death ({ending}): {left()}"
        assert took <= 1.0, f"the tree took {took:.3f} s to go"
    finally:
        host_proc.kill()
        host_proc.wait()
        for _ in range(5):
            for p in pids + _marked(mark):
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            if not _marked(mark):
                break


def test_descriptor_exhaustion_is_a_spawn_error_with_its_errno() -> None:
    """RLIMIT_NOFILE 64 and 100 runs at once from as many threads: a run
    that cannot start is SpawnError with errno EMFILE (it was
    InternalError 'cannot create a reactor for this thread')."""
    out = host(
        """
        import errno, resource, threading, dsh_native
        ex = dsh_native.Executor(grace_ms=300)
        ex.run(ex.resolve("true"))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        outcomes = []
        def one():
            try:
                r = ex.run(ex.resolve("echo ok"))
                outcomes.append("ran" if r.stdout.text == "ok\\n" else repr(r))
            except dsh_native.SpawnError as e:
                outcomes.append("refused" if e.errno in (errno.EMFILE, errno.ENFILE) else repr(e))
            except BaseException as e:
                outcomes.append(repr(e))
        threads = [threading.Thread(target=one) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        odd = [o for o in outcomes if o not in ("ran", "refused")]
        print("ran", outcomes.count("ran"), "refused", outcomes.count("refused"), "odd", odd)
        """
    )
    assert "odd []" in out, out
    refused = int(out.split("refused ", 1)[1].split()[0])
    assert refused >= 1, f"no run met the descriptor limit: {out}"
