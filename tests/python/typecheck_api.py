"""Uses the whole public API; checked with `mypy --strict`, then run."""

from __future__ import annotations

import asyncio
import pathlib
from typing import List, Optional

import dsh_native
from dsh_native import (
    CancelToken,
    CollectedOutput,
    DshError,
    Executor,
    InvalidArgumentError,
    Process,
    ProcessRead,
    RunResult,
    SandboxInfo,
    SandboxPolicy,
    Spec,
    SpawnError,
    Unsubscribe,
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
        status: str = p.status
        r2: ProcessRead = ex.read_output(p.id)

        async def main() -> RunResult:
            await ex.start(spec).wait_async()
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
        print(group, chunk, left, tail, term.exit_code, term.signal, term.survivors)
        print(mode, policy, code, sig, info, flags, path, text, lossy, again, owner, procs, killed,
              removed, status, r2, r3, dsh_native.__version__)
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
