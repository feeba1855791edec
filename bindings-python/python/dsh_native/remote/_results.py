"""What the server answers, as the remote executor's result types (the local
face's, field for field), and ``Spec``, a resolved request."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Dict, Literal, NamedTuple, Optional, Type

from ._checks import _excerpt, PROTOCOL_VERSION, ProtocolError, SandboxPolicy


def _py_bool(b: bool) -> str:
    return "True" if b else "False"


@dataclass(frozen=True, eq=False)
class SandboxInfo:
    """Sandbox facts of a run or a settled process (docs/sandbox.md)."""

    mode: str
    denied: bool
    enforcement: Optional[str]
    metadata: bool
    runner_failed: Optional[bool]
    network: str
    network_enforcement: Optional[str]

    def __repr__(self) -> str:
        rf = "None" if self.runner_failed is None else _py_bool(self.runner_failed)
        return (
            f"SandboxInfo(mode={self.mode!r}, denied={_py_bool(self.denied)}, "
            f"enforcement={self.enforcement!r}, metadata={_py_bool(self.metadata)}, runner_failed={rf})"
        )


@dataclass(frozen=True, eq=False)
class CollectedOutput:
    """One stream of a foreground run; ``spill_path`` names a file on the far host."""

    text: str
    truncated: bool
    spill_path: Optional[str]
    spill_error: Optional[str]

    def __repr__(self) -> str:
        raw = self.text.encode("utf-8", "surrogatepass")
        if len(raw) > 60:
            shown = repr(raw[:60].decode("utf-8", "ignore")) + "…"
        else:
            shown = repr(self.text)
        return f"CollectedOutput(text={shown}, truncated={_py_bool(self.truncated)}, spill_path={self.spill_path!r})"


@dataclass(frozen=True, eq=False)
class RunResult:
    """The outcome of a foreground run (docs/running.md)."""

    exit_code: Optional[int]
    signal: Optional[str]
    exit_status_unavailable: bool
    timed_out: bool
    aborted: bool
    timeout_ms: int
    stdout: CollectedOutput
    stderr: CollectedOutput
    sandbox: Optional[SandboxInfo]
    survivors: int
    background_id: Optional[str]
    limit: Optional[str]
    limits_enforcement: Dict[str, str]

    def __repr__(self) -> str:
        return (
            f"RunResult(exit_code={self.exit_code!r}, signal={self.signal!r}, "
            f"timed_out={_py_bool(self.timed_out)}, aborted={_py_bool(self.aborted)}, "
            f"timeout_ms={self.timeout_ms}, stdout={self.stdout!r}, stderr={self.stderr!r})"
        )


@dataclass(frozen=True, eq=False)
class ProcessRead:
    """What one ``read_output`` call returns."""

    delta: str
    lossy: bool
    stdout_spill_path: Optional[str]
    stderr_spill_path: Optional[str]
    stdout_spill_error: Optional[str]
    stderr_spill_error: Optional[str]

    def __repr__(self) -> str:
        return (
            f"ProcessRead(delta={self.delta!r}, lossy={_py_bool(self.lossy)}, "
            f"stdout_spill_path={self.stdout_spill_path!r}, stderr_spill_path={self.stderr_spill_path!r})"
        )


_NOTHING_READ = ProcessRead("", False, None, None, None, None)


class OutputChunk(NamedTuple):
    """A piece of a streamed run's output, as ``run(..., on_output=...)``
    hands it over: ``data``, the bytes as the command wrote them (a chunk
    may end inside a character that the next one finishes); ``stream``,
    ``'stdout'`` or ``'stderr'``; ``offset``, where ``data`` starts in that
    stream. A stream's chunks come in order, and one that starts past where
    the previous one ended shows output left out for a slow reader."""

    stream: Literal["stdout", "stderr"]
    offset: int
    data: bytes


def _compose_delta(stdout: str, stderr: str) -> str:
    """A read's ``delta`` from its two streams' text, as a consuming read
    composes it (the core's ``compose_delta``, docs/running.md): the stdout
    part, then, only when there is stderr text, a newline if the stdout
    part lacks one, the line ``[stderr]`` and the stderr part."""
    if not stderr:
        return stdout
    if stdout and not stdout.endswith("\n"):
        stdout += "\n"
    return f"{stdout}[stderr]\n{stderr}"


def _opt_str(v: Any) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"expected a string or null, got {_excerpt(v)}")


def _opt_int(v: Any) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise TypeError(f"expected an integer or null, got {_excerpt(v)}")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise TypeError(f"expected a boolean, got {_excerpt(v)}")


def _int(v: Any) -> int:
    i = _opt_int(v)
    if i is None:
        raise TypeError("expected an integer, got null")
    return i


def _str(v: Any) -> str:
    s = _opt_str(v)
    if s is None:
        raise TypeError("expected a string, got null")
    return s


def _obj(v: Any) -> Dict[str, Any]:
    if isinstance(v, dict):
        return v
    raise TypeError(f"expected an object, got {_excerpt(v)}")


def _str_map(v: Any) -> Dict[str, str]:
    return {str(k): _str(x) for k, x in _obj(v).items()}


def _sandbox_info(v: Any) -> Optional[SandboxInfo]:
    if v is None:
        return None
    o = _obj(v)
    rf = o.get("runner_failed")
    return SandboxInfo(
        mode=_str(o["mode"]),
        denied=_bool(o["denied"]),
        enforcement=_opt_str(o.get("enforcement")),
        metadata=_bool(o["metadata"]),
        runner_failed=None if rf is None else _bool(rf),
        network=_str(o["network"]),
        network_enforcement=_opt_str(o.get("network_enforcement")),
    )


def _collected(v: Any) -> CollectedOutput:
    o = _obj(v)
    return CollectedOutput(
        text=_str(o["text"]),
        truncated=_bool(o["truncated"]),
        spill_path=_opt_str(o.get("spill_path")),
        spill_error=_opt_str(o.get("spill_error")),
    )


def _run_result(v: Any) -> RunResult:
    o = _obj(_obj(v)["result"])
    return RunResult(
        exit_code=_opt_int(o.get("exit_code")),
        signal=_opt_str(o.get("signal")),
        exit_status_unavailable=_bool(o["exit_status_unavailable"]),
        timed_out=_bool(o["timed_out"]),
        aborted=_bool(o["aborted"]),
        timeout_ms=_int(o["timeout_ms"]),
        stdout=_collected(o["stdout"]),
        stderr=_collected(o["stderr"]),
        sandbox=_sandbox_info(o.get("sandbox")),
        survivors=_int(o["survivors"]),
        background_id=_opt_str(o.get("background_id")),
        limit=_opt_str(o.get("limit")),
        limits_enforcement=_str_map(o.get("limits_enforcement") or {}),
    )


def _process_read(v: Any) -> ProcessRead:
    o = _obj(v)
    return ProcessRead(
        delta=_str(o["delta"]),
        lossy=_bool(o["lossy"]),
        stdout_spill_path=_opt_str(o.get("stdout_spill_path")),
        stderr_spill_path=_opt_str(o.get("stderr_spill_path")),
        stdout_spill_error=_opt_str(o.get("stdout_spill_error")),
        stderr_spill_error=_opt_str(o.get("stderr_spill_error")),
    )


class _StreamRead(NamedTuple):
    """One stream's ``read_from`` answer."""

    text: str
    next_offset: int
    lossy: bool
    spill_path: Optional[str]
    spill_error: Optional[str]


def _stream_read(v: Any) -> _StreamRead:
    o = _obj(v)
    return _StreamRead(
        text=_str(o["text"]),
        next_offset=_int(o["next_offset"]),
        lossy=_bool(o["lossy"]),
        spill_path=_opt_str(o.get("spill_path")),
        spill_error=_opt_str(o.get("spill_error")),
    )


def _snapshot(v: Any) -> Dict[str, Any]:
    """A process as the server sent it, its facts checked once here so that
    the properties can read them without a second thought."""
    o = _obj(v)
    _str(o["id"])
    _str(o["command"])
    _opt_str(o.get("owner"))
    _str(o["status"])
    _bool(o["settled"])
    _opt_int(o.get("exit_code"))
    _opt_str(o.get("signal"))
    _bool(o.get("exit_status_unavailable", False))
    _int(o.get("survivors", 0))
    _sandbox_info(o.get("sandbox"))
    _opt_str(o.get("limit"))
    _str_map(o.get("limits_enforcement") or {})
    _bool(o.get("has_stdin_pipe", False))
    output = _obj(o.get("output") or {})
    _int(output.get("stdout_read", 0))
    _int(output.get("stderr_read", 0))
    return o


class _Shape:
    """Turns a result of the wrong shape into a ProtocolError naming the call."""

    def __init__(self, method: str) -> None:
        self.method = method

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc is not None and isinstance(exc, (KeyError, TypeError, ValueError, AttributeError)):
            what = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ProtocolError(
                f"the server's answer to {self.method} is not what protocol version "
                f"{PROTOCOL_VERSION} says ({what})"
            ) from exc


class Spec:
    """A fully resolved spec, made by ``Executor.resolve`` on the far side:
    every field explicit (docs/requests.md). Immutable; it is sent back as
    it came for ``run`` and ``start``."""

    __slots__ = ("_wire", "_stdin")

    def __init__(self, wire: Dict[str, Any]) -> None:
        with _Shape("resolve"):
            _str(wire["command"])
            _str(wire["workdir"])
            _int(wire["timeout_ms"])
            _int(wire["stdout_max_bytes"])
            stdin = _opt_str(wire.get("stdin_base64"))
            self._stdin = None if stdin is None else base64.b64decode(stdin, validate=True)
            _str(wire["on_expiry"])
            policy = wire.get("sandbox_policy")
            if policy is not None:
                for key in ("mode", "workspace_root", "network"):
                    _str(_obj(policy)[key])
            for key in ("env", "dsh_env"):
                if wire.get(key) is not None:
                    _str_map(wire[key])
            _obj(wire.get("limits") or {})
        self._wire = wire

    @property
    def command(self) -> str:
        return str(self._wire["command"])

    @property
    def workdir(self) -> str:
        """The absolute workdir on the far host."""
        return str(self._wire["workdir"])

    @property
    def timeout_ms(self) -> int:
        return int(self._wire["timeout_ms"])

    @property
    def stdout_max_bytes(self) -> int:
        return int(self._wire["stdout_max_bytes"])

    @property
    def stdin(self) -> Optional[bytes]:
        return self._stdin

    @property
    def stdin_pipe(self) -> bool:
        return bool(self._wire.get("stdin_pipe"))

    @property
    def on_expiry(self) -> Literal["kill", "background"]:
        return "background" if self._wire["on_expiry"] == "background" else "kill"

    @property
    def env(self) -> Optional[Dict[str, str]]:
        env = self._wire.get("env")
        return None if env is None else dict(env)

    @property
    def dsh_env(self) -> Optional[Dict[str, str]]:
        env = self._wire.get("dsh_env")
        return None if env is None else dict(env)

    @property
    def owner(self) -> Optional[str]:
        owner = self._wire.get("owner")
        return None if owner is None else str(owner)

    @property
    def sandbox_policy(self) -> Optional[SandboxPolicy]:
        p = self._wire.get("sandbox_policy")
        if p is None:
            return None
        return SandboxPolicy(mode=p["mode"], workspace_root=p["workspace_root"], network=p["network"])

    @property
    def limits(self) -> Dict[str, int]:
        return {str(k): int(v) for k, v in (self._wire.get("limits") or {}).items()}

    def __repr__(self) -> str:
        return (
            f"Spec(command={self.command!r}, workdir={self.workdir!r}, timeout_ms={self.timeout_ms}, "
            f"stdout_max_bytes={self.stdout_max_bytes}, owner={self.owner!r})"
        )
