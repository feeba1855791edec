"""Uses the whole public API; checked with `mypy --strict`, then run."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Dict, List, Optional

import dsh_native
from dsh_native import (
    CancelToken,
    CollectedOutput,
    DshError,
    Executor,
    InvalidArgumentError,
    LimitUnavailableError,
    Process,
    ProcessRead,
    RunResult,
    SandboxInfo,
    SandboxPolicy,
    Spec,
    SpawnError,
    StdinClosedError,
    Unsubscribe,
    PIPE,
)


def use_everything() -> None:
    with Executor(timeout_ms=10_000, max_timeout_ms=20_000, max_output_bytes=1000, max_spill_bytes=1 << 20,
                  grace_ms=500, cwd="/tmp", spill_dir="/tmp") as ex:
        mode: Optional[str] = ex.sandbox_mode
        spec: Spec = ex.resolve(
            "echo hi", workdir="/tmp", timeout_ms=5000, stdout_max_bytes=100, stdin=b"x",
            env={"A": "1"}, dsh_env={"DSH_A": "1"}, owner="me", sandbox_policy={"mode": "danger-full-access"},
        )
        policy: Optional[SandboxPolicy] = spec.sandbox_policy
        for where in (b"/tmp", pathlib.Path("/tmp"), pathlib.PurePosixPath("/tmp")):
            by_path: Spec = ex.resolve(
                "true", workdir=where, sandbox_policy={"mode": "danger-full-access", "workspace_root": where}
            )
            root: Optional[str] = by_path.sandbox_policy.workspace_root if by_path.sandbox_policy else None
            workdir: str = by_path.workdir
            print(root, workdir, ex.resolve("true", sandbox_policy=by_path.sandbox_policy))
        result: RunResult = ex.run(spec, cancel=CancelToken())
        out: CollectedOutput = result.stdout
        code: Optional[int] = result.exit_code
        sig: Optional[str] = result.signal
        info: Optional[SandboxInfo] = result.sandbox
        flags: List[bool] = [result.timed_out, result.aborted, out.truncated]
        path: Optional[str] = out.spill_path
        p: Process = ex.start(spec)
        p.wait(timeout=10)
        read: ProcessRead = p.read_output()
        text: str = read.delta + (read.stdout_spill_path or "") + (read.stderr_spill_path or "")
        lossy: bool = read.lossy
        again: Optional[Process] = ex.get(p.id)
        owner: Optional[str] = ex.owner_of(p.id)
        procs: List[Process] = ex.list()
        killed: bool = ex.kill(p.id) or p.kill()
        unsubscribe: Unsubscribe = ex.on_task_done(lambda proc: print(proc.id, proc.status, proc.exit_code))
        removed: bool = unsubscribe()
        piped: Spec = ex.resolve("cat", stdin=PIPE, on_expiry="background", timeout_ms=100)
        expiry: str = piped.on_expiry
        has_pipe: bool = piped.stdin_pipe
        handed: RunResult = ex.run(piped)
        handed_id: Optional[str] = handed.background_id
        if handed_id is not None:
            q = ex.get(handed_id)
            if q is not None and q.has_stdin_pipe:
                q.write_stdin(b"bytes")
                q.write_stdin("text")
                closed: bool = q.close_stdin()
                print(expiry, has_pipe, closed)
        try:
            p.write_stdin("x")
        except StdinClosedError as e:
            reason: Optional[str] = e.reason
            print(reason, e.errno)
        status: str = p.status
        r2: ProcessRead = ex.read_output(p.id)

        async def main() -> RunResult:
            await ex.start(spec).wait_async()
            fed = ex.start(ex.resolve("cat >/dev/null", stdin=PIPE))
            await fed.write_stdin_async(b"async bytes")
            fed.close_stdin()
            await fed.wait_async()
            return await ex.run_async(spec)

        r3: RunResult = asyncio.run(main())
        term: dsh_native.Terminal = ex.spawn_terminal(["cat"], cwd="/tmp", env={"A": "1"}, rows=24, cols=80, grace_ms=500)
        term.write("typed\n")
        term.resize(30, 100)
        fg: Optional[dsh_native.Foreground] = term.inspect_foreground()
        group: int = term.signal_foreground("SIGINT") if fg is not None else 0
        chunk: str = term.read(timeout=1) + term.read_output()
        left: int = term.terminate()

        async def drive(t: dsh_native.Terminal) -> str:
            parts = [part async for part in t]
            await t.wait_async()
            return "".join(parts) + str(await t.terminate_async())

        tail: str = asyncio.run(drive(ex.spawn_terminal(command="echo done")))
        sp: dsh_native.Spawned = ex.spawn(["cat"], stdin=dsh_native.PIPE, stdout=dsh_native.Collect(1000, 1 << 20),
                                          stderr=dsh_native.INHERIT, env={"A": "1", "B": None}, grace_ms=500,
                                          timeout_ms=60_000)
        if sp.stdin is not None:
            sp.stdin.write(b"typed")
            sp.stdin.close()
        sp.wait(10)
        stopped_at_timeout: bool = sp.timed_out
        at: dsh_native.OffsetRead = sp.read_from("stdout", 0)
        sp.terminate()
        sp.wait_tree(10)
        print(sp.pid, at.text, at.next_offset, at.lossy, at.spill_path, sp.exit_code, sp.tree_gone)
        print(group, chunk, left, tail, term.exit_code, term.signal, term.survivors)
        print(mode, policy, code, sig, info, flags, path, text, lossy, again, owner, procs, killed,
              removed, status, r2, r3, dsh_native.__version__)
    with Executor(limits={"processes": 64}) as limited:
        lspec = limited.resolve(
            "true",
            limits={"memory_bytes": 1 << 28, "cpu_seconds": 5},
            sandbox_policy={"mode": "danger-full-access", "network": "deny"},
        )
        lr = limited.run(lspec)
        which: Optional[str] = lr.limit
        how: Dict[str, str] = dict(lr.limits_enforcement)
        net: Optional[str] = lr.sandbox.network_enforcement if lr.sandbox else None
        set_limits: Dict[str, int] = lspec.limits
        support: Dict[str, str] = dict(dsh_native.limits_support())
        print(which, how, net, set_limits, support)
    try:
        unlimited = Executor()
        unlimited.run(unlimited.resolve("true", limits={"open_files": 1 << 40}))
    except LimitUnavailableError as e:
        print(e.limit)
    try:
        Executor(grace_ms=-1)
    except InvalidArgumentError as e:
        field: Optional[str] = e.field
        print(field)
    except DshError:
        raise
    try:
        Executor().run(Executor().resolve("true", workdir="/nonexistent"))
    except SpawnError as e:
        errno: Optional[int] = e.errno
        print(errno)


if __name__ == "__main__":
    use_everything()
