from typing import Callable, Dict, List, Literal, Mapping, Optional, TypedDict, Union, final
import asyncio
import os

from typing_extensions import disjoint_base

__version__: str
__all__ = [
    "__version__",
    "Executor",
    "Process",
    "CancelToken",
    "Unsubscribe",
    "Spec",
    "RunResult",
    "CollectedOutput",
    "ProcessRead",
    "SandboxPolicy",
    "SandboxInfo",
    "limits_support",
]

_SandboxModeName = Literal["read-only", "workspace-write", "danger-full-access"]
_Status = Literal["running", "completed", "killed"]
_NetworkName = Literal["allow", "deny", "loopback"]
# The limits a command can end by (``open_files`` never ends one: the
# kernel refuses an open with EMFILE and reports nothing).
_LimitName = Literal["memory", "processes", "cpu", "file_size"]

class _Limits(TypedDict, total=False):
    """Per-command limits (docs/limits.md); every key optional."""

    memory_bytes: Union[int, float]
    processes: Union[int, float]
    cpu_seconds: Union[int, float]
    file_size_bytes: Union[int, float]
    open_files: Union[int, float]

def limits_support() -> Dict[str, str]: ...

@final
class CancelToken:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

@final
class SandboxPolicy:
    @property
    def mode(self) -> _SandboxModeName: ...
    @property
    def workspace_root(self) -> str:
        """As ``os.fsdecode`` makes it: ``os.fsencode`` gives back the bytes."""
    @property
    def network(self) -> _NetworkName: ...

@final
class SandboxInfo:
    @property
    def mode(self) -> _SandboxModeName: ...
    @property
    def denied(self) -> bool: ...
    @property
    def enforcement(self) -> Optional[Literal["full", "partial"]]: ...
    @property
    def runner_failed(self) -> Optional[bool]: ...
    @property
    def network(self) -> _NetworkName: ...
    @property
    def network_enforcement(self) -> Optional[Literal["full", "partial"]]: ...

@final
class Spec:
    @property
    def command(self) -> str: ...
    @property
    def workdir(self) -> str:
        """As ``os.fsdecode`` makes it: ``os.fsencode`` gives back the bytes."""
    @property
    def timeout_ms(self) -> int: ...
    @property
    def stdout_max_bytes(self) -> int: ...
    @property
    def stdin(self) -> Optional[bytes]: ...
    @property
    def env(self) -> Optional[Dict[str, str]]: ...
    @property
    def dsh_env(self) -> Optional[Dict[str, str]]: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def sandbox_policy(self) -> Optional[SandboxPolicy]: ...
    @property
    def limits(self) -> Dict[str, int]: ...

@final
class CollectedOutput:
    @property
    def text(self) -> str: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def spill_path(self) -> Optional[str]: ...
    @property
    def spill_error(self) -> Optional[str]: ...

@final
class RunResult:
    @property
    def exit_code(self) -> Optional[int]: ...
    @property
    def signal(self) -> Optional[str]: ...
    @property
    def exit_status_unavailable(self) -> bool: ...
    @property
    def survivors(self) -> int: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def aborted(self) -> bool: ...
    @property
    def timeout_ms(self) -> int: ...
    @property
    def stdout(self) -> CollectedOutput: ...
    @property
    def stderr(self) -> CollectedOutput: ...
    @property
    def sandbox(self) -> Optional[SandboxInfo]: ...
    @property
    def limit(self) -> Optional[_LimitName]: ...
    @property
    def limits_enforcement(self) -> Dict[str, str]: ...

@final
class ProcessRead:
    @property
    def delta(self) -> str: ...
    @property
    def lossy(self) -> bool: ...
    @property
    def stdout_spill_path(self) -> Optional[str]: ...
    @property
    def stderr_spill_path(self) -> Optional[str]: ...
    @property
    def stdout_spill_error(self) -> Optional[str]: ...
    @property
    def stderr_spill_error(self) -> Optional[str]: ...

@final
class Process:
    @property
    def id(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def status(self) -> _Status: ...
    @property
    def exit_code(self) -> Optional[int]: ...
    @property
    def signal(self) -> Optional[str]: ...
    @property
    def exit_status_unavailable(self) -> bool: ...
    @property
    def survivors(self) -> int: ...
    @property
    def sandbox(self) -> Optional[SandboxInfo]: ...
    @property
    def limit(self) -> Optional[_LimitName]: ...
    @property
    def limits_enforcement(self) -> Dict[str, str]: ...
    @property
    def done(self) -> bool: ...
    def read_output(self) -> ProcessRead: ...
    def kill(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> None: ...
    def wait_async(self) -> "asyncio.Future[None]": ...

@final
class Unsubscribe:
    def __call__(self) -> bool: ...

_Number = Union[int, float]
_Path = Union[str, "os.PathLike[str]"]
# Like subprocess's cwd: a str (filesystem encoding, surrogateescape), bytes,
# or an os.PathLike of either.
_FsPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

@disjoint_base
class Executor:
    def __new__(
        cls,
        *,
        cwd: Optional[_Path] = None,
        timeout_ms: Optional[_Number] = None,
        max_timeout_ms: Optional[_Number] = None,
        max_output_bytes: Optional[_Number] = None,
        max_spill_bytes: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        spill_dir: Optional[_Path] = None,
        retain_settled: Optional[_Number] = None,
        sandbox_mode: Optional[_SandboxModeName] = None,
        limits: Optional[_Limits] = None,
    ) -> "Executor": ...
    def reconfigure(
        self,
        *,
        cwd: Optional[_Path] = None,
        timeout_ms: Optional[_Number] = None,
        max_timeout_ms: Optional[_Number] = None,
        max_output_bytes: Optional[_Number] = None,
        max_spill_bytes: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        spill_dir: Optional[_Path] = None,
        retain_settled: Optional[_Number] = None,
        sandbox_mode: Optional[_SandboxModeName] = None,
        limits: Optional[_Limits] = None,
    ) -> None: ...
    @property
    def sandbox_mode(self) -> Optional[_SandboxModeName]: ...
    @property
    def disposed(self) -> bool: ...
    def resolve(
        self,
        command: str,
        *,
        workdir: Optional[_FsPath] = None,
        timeout_ms: Optional[_Number] = None,
        stdout_max_bytes: Optional[_Number] = None,
        stdin: Union[str, bytes, None] = None,
        env: Optional[Mapping[str, str]] = None,
        dsh_env: Optional[Mapping[str, str]] = None,
        owner: Optional[str] = None,
        sandbox_policy: Union[SandboxPolicy, Mapping[str, Optional[_FsPath]], None] = None,
        limits: Optional[_Limits] = None,
    ) -> Spec: ...
    def run(self, spec: Spec, cancel: Optional[CancelToken] = None) -> RunResult: ...
    def _run_with_callback(
        self,
        spec: Spec,
        cancel: CancelToken,
        callback: Callable[[Optional[RunResult], Optional[BaseException]], None],
    ) -> None: ...
    def start(self, spec: Spec) -> Process: ...
    def get(self, id: str) -> Optional[Process]: ...
    def owner_of(self, id: str) -> Optional[str]: ...
    def list(self) -> List[Process]: ...
    def read_output(self, id: str) -> ProcessRead: ...
    def kill(self, id: str) -> bool: ...
    def forget(self, id: str) -> None: ...
    def on_task_done(self, callback: Callable[[Process], object]) -> Unsubscribe: ...
    def close(self) -> None: ...
