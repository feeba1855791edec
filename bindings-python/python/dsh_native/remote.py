"""A remote executor: the API of ``dsh_native.Executor``, driving ``dsh serve``
on another machine (or in a container) over its protocol (docs/protocol.md).

>>> from dsh_native.remote import Executor
>>> with Executor(["ssh", "build-1", "dsh", "serve", "--stdio"], timeout_ms=10_000) as ex:
...     result = ex.run(ex.resolve("echo hello; exit 3"))
>>> (result.exit_code, result.stdout.text)
(3, 'hello\\n')

The transport is a command speaking the protocol on its stdin and stdout
(``ssh host dsh serve --stdio``, ``kubectl exec -i pod -- dsh serve
--stdio``) or the unix socket of ``dsh serve --listen unix:PATH``. The
far side runs an executor of its own for this connection; when the
connection ends, for whatever reason, everything it started is stopped
there.

What differs from the local executor, and why:

- Commands, paths, spill files and environment are the far host's: a
  relative ``workdir`` is relative to the server's ``cwd``, the scrubbed
  environment is the server's, and spill paths name files over there.
- Paths travel as UTF-8 text (the protocol's rule): a path whose bytes are
  not UTF-8 is refused naming its field.
- ``spawn`` is not in the protocol, so it is not here.
- A :class:`Terminal` (``spawn_terminal``) reads its output by long-poll:
  the server sends output only when a reader asks (``read``, ``async
  for``), so its bound on unread output holds across the connection, and
  what a reader that gave up was sent goes to the next one. Its facts are
  asked of the server until final; ``Foreground`` is a plain value here.
- A transport that ends (ssh killed, network gone, server crashed) fails
  every pending and later call with :class:`TransportError`, naming the
  transport and quoting the end of its stderr; unless the server keeps
  sessions (``dsh serve --stdio --linger SECONDS``): then the client starts
  the transport again and resumes the session, calls made meanwhile wait,
  and output is read by offset so that none is lost or read twice
  (``Executor``, ``reconnect``).
- ``run(..., on_output=...)`` hands the output over as it arrives, in
  :class:`OutputChunk` pieces, besides the result.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import collections
import copy
import decimal
import errno as _errno
import functools
import itertools
import json
import math
import operator
import os
import queue
import shlex
import signal
import socket as _socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    Union,
)

from ._errors import (
    AlreadyCancelledError,
    BlockingCallError,
    DisposedError,
    DshError,
    ForkedChildError,
    InternalError,
    InvalidArgumentError,
    LimitUnavailableError,
    NotFoundError,
    SandboxUnavailableError,
    SpawnError,
    StdinClosedError,
    StillRunningError,
    TerminalClosedError,
)
from ._helpers import resolve_future
from ._native import CancelToken
from ._native import SandboxPolicy as _NativeSandboxPolicy
from ._native import __version__

if TYPE_CHECKING:
    from ._native import _Limits, _SandboxModeName

__all__ = [
    "AnswerLost",
    "CollectedOutput",
    "Executor",
    "Foreground",
    "OutputChunk",
    "PIPE",
    "Process",
    "ProcessRead",
    "ProtocolError",
    "RunResult",
    "SandboxInfo",
    "SandboxPolicy",
    "Spec",
    "Terminal",
    "TransportError",
    "Unsubscribe",
]

#: ``resolve(..., stdin=PIPE)``: as for the local executor (``subprocess.PIPE``).
PIPE: int = subprocess.PIPE

_Number = Union[int, float]
_Path = Union[str, "os.PathLike[str]"]
_FsPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: The protocol version this client speaks.
PROTOCOL_VERSION = 1

# The longest line the server reads (cli/src/protocol/mod.rs); a longer one
# is answered with an error nobody could match to its call, so none is sent.
_MAX_MESSAGE_BYTES = 48 << 20

# Stdin (or a terminal write) larger than this goes in several write_stdin
# (terminal_write) calls, each well under the line limit once in base64; the
# server takes them in call order.
_STDIN_PIECE = 16 << 20

# How long a blocking wait sleeps before letting Python look for Ctrl-C: a
# signal delivered to another thread does not wake the waiting one.
_SIGNAL_POLL = 0.05

# How often a run polls its CancelToken, which has no callback to call.
_CANCEL_POLL = 0.01

# The end of a transport's stderr kept for error messages.
_STDERR_TAIL_BYTES = 8192

_LIMIT_KEYS = ("memory_bytes", "processes", "cpu_seconds", "file_size_bytes", "open_files")

# Who this client is, in each initialize (the server's logs).
_CLIENT = {"name": "dsh_native.remote", "version": __version__}

# Reconnecting to a session that lingers: the first retry after this long,
# the wait doubling up to the most, until the session's linger time passed.
_RECONNECT_FIRST_S = 0.1
_RECONNECT_MOST_S = 2.0

# The calls that only read. After a reconnection, one whose answer was lost
# with the connection is asked again (docs/protocol.md, "Lingering
# sessions"); any other may have taken effect, and fails with AnswerLost.
_READING_METHODS = frozenset(
    {
        "resolve", "get", "list", "owner_of", "read_from", "wait",
        "terminal_get", "terminal_wait", "terminal_inspect_foreground", "terminal_wait_input_waiting",
    }
)  # fmt: skip

# How many bytes of a streamed run's output may wait here for ``on_output``.
# Past it the connection is read no further until the callback catches up,
# so the server holds the run back (docs/protocol.md, ``run``), as a slow
# terminal holds a command: a slow callback costs this much memory at most.
_STREAM_AHEAD_BYTES = 8 << 20

# How long a callback may take no chunk while that much waits before chunks
# are left out instead: one that waits for something this connection must
# bring (a call of its own) would otherwise wait for ever.
_STREAM_STALL_S = 2.0


# Errors -----------------------------------------------------------------


class TransportError(DshError, ConnectionError):
    """The connection to the server is gone (or never came up): every call
    pending on it failed with this, and every later one does too. The far
    side stops everything this connection started when it notices the end
    (or, where sessions linger, when their time passed and nobody resumed
    this one). ``transport`` names the transport; the message quotes the
    end of its stderr, where ssh and kubectl explain themselves. Its
    subclass :class:`AnswerLost` is one call's loss on a connection that
    was resumed: the executor goes on."""

    transport: Optional[str] = None


class AnswerLost(TransportError):
    """The connection dropped while this call was on its way, and was
    resumed, but the answer was lost with it: the call may have taken
    effect or not (a ``start``, a ``kill``, a ``write_stdin``: look before
    doing it again). Only this call failed; the executor goes on. Calls
    that only read are asked again instead and never fail this way.
    ``method`` names the protocol method (``kill``, ``write_stdin``)."""

    method: Optional[str] = None


class ProtocolError(TransportError):
    """The server sent something that is not the protocol (not JSON-RPC, an
    answer to nothing, a result of the wrong shape). The connection is ended
    when the stream itself is broken, since no later answer can be trusted
    to belong to its call."""


# The core's messages, for the few refusals this client makes itself (so
# that they read as the local executor's do).
_DISPOSED = "executor is disposed"
_ALREADY_CANCELLED = "cancelled before the command started"
_WOULD_BLOCK = (
    "blocking call made from inside an async runtime or a listener callback; use the async API"
)
_STDIN_END = {
    "not-piped": "it was not started with a stdin pipe",
    "closed": "its stdin was closed by close_stdin",
    "exited": "it has exited",
    "broken": "the command closed its stdin",
}


def _invalid(field: str, problem: str) -> InvalidArgumentError:
    e = InvalidArgumentError(f"{field} {problem}")
    e.field = field
    return e


def _not_found(id: str) -> NotFoundError:
    """The core's error for an id the registry does not have."""
    e = NotFoundError(f"no background process with id {json.dumps(id, ensure_ascii=False)}")
    e.id = id
    return e


def _stdin_closed(id: str, reason: str) -> StdinClosedError:
    e = StdinClosedError(_errno.EPIPE, f"cannot write to the stdin of {id}: {_STDIN_END[reason]}")
    e.id = id
    e.reason = reason
    return e


def _fresh(e: BaseException) -> BaseException:
    """A copy of a stored error, raised anew: one object raised from many
    threads would collect every raiser's traceback."""
    try:
        return copy.copy(e)
    except Exception:
        return e


def _errno_of(code: str, number: Any) -> int:
    """This host's number for the errno the server named (``ENOENT``): the
    far host may number them differently; the name is what it means."""
    local = getattr(_errno, code, None)
    if isinstance(local, int):
        return local
    return number if isinstance(number, int) and not isinstance(number, bool) else 0


def _error_from_rpc(error: Any, method: str, params: Mapping[str, Any]) -> BaseException:
    """The exception the local executor raises for the core error the server
    reported: the same class and attributes (``field``, ``errno``, ``id``,
    ``reason``, ``limit``)."""
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return ProtocolError(f"the server answered {method} with a malformed error: {_excerpt(error)}")
    message: str = error["message"]
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    code = data.get("code")
    id = params.get("id") if isinstance(params.get("id"), str) else None
    if code == "INVALID_ARGUMENT":
        ia = InvalidArgumentError(message)
        field = data.get("field")
        ia.field = field if isinstance(field, str) else None
        return ia
    if code == "NOT_FOUND":
        nf = NotFoundError(message)
        nf.id = id
        return nf
    if code == "STILL_RUNNING":
        sr = StillRunningError(message)
        sr.id = id
        return sr
    if code == "STDIN_CLOSED":
        sc = StdinClosedError(_errno.EPIPE, message)
        sc.id = data.get("id") if isinstance(data.get("id"), str) else id
        sc.reason = data.get("reason") if isinstance(data.get("reason"), str) else None
        return sc
    if code == "LIMIT_UNAVAILABLE":
        lu = LimitUnavailableError(message)
        lu.limit = str(data.get("limit"))
        return lu
    simple: Dict[str, Type[DshError]] = {
        "DISPOSED": DisposedError,
        "ABORT_ERR": AlreadyCancelledError,
        "SANDBOX_UNAVAILABLE": SandboxUnavailableError,
        "WOULD_BLOCK": BlockingCallError,
        "FORKED_CHILD": ForkedChildError,
        "TERMINAL_CLOSED": TerminalClosedError,
        "INTERNAL": InternalError,
    }
    if isinstance(code, str) and code in simple:
        return simple[code](message)
    if isinstance(code, str) and "errno" in data:
        return SpawnError(_errno_of(code, data["errno"]), message)
    if code is None:
        # A JSON-RPC refusal with no core error behind it: an unknown method
        # or a message this client got wrong — a version mismatch, or a bug.
        return InternalError(
            f"the server refused {method}: {message} (JSON-RPC error {error.get('code')!r})"
        )
    return DshError(f"{message} ({code})")


def _excerpt(value: Any, limit: int = 200) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    text = text.rstrip("\n")
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


# Parameters: the local face's checks, in Python -----------------------------
#
# The local executor's Python layer refuses a value of the wrong Python type
# before the core sees it, naming the field; the same checks run here with
# the same messages, so that a harness sees the same error from either. The
# values themselves (ranges, NUL bytes, names) are judged by the core on the
# far side, whose messages are the local core's.


def _type_name(v: object) -> str:
    return type(v).__name__


def _utf8(v: object, field: str, what: str) -> Optional[str]:
    """``v`` as text UTF-8 can carry; None when it is not a ``str``."""
    if not isinstance(v, str):
        return None
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        at = f": {v[e.start]!r} at index {e.start}"
        raise _invalid(field, f"{what}is not encodable as UTF-8 (a lone surrogate{at})") from None
    return str(v)


def _required_str(v: object, field: str, what: str) -> str:
    s = _utf8(v, field, what)
    if s is None:
        raise _invalid(field, f"{what}must be a str, got {_type_name(v)}")
    return s


def _optional_str(v: object, field: str) -> Optional[str]:
    if v is None:
        return None
    fspath = getattr(v, "__fspath__", None)
    if callable(fspath):
        v = fspath()
    return _required_str(v, field, "")


def _rust_float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    return "inf" if f > 0 else "-inf"


def _rust_f64(f: float) -> str:
    """``f`` as Rust's ``{}`` shows an f64 (``0``, ``-1``, ``2.5``,
    ``100000000000000000000``, ``NaN``, ``inf``): the core puts the value
    it refused in its message that way, and the messages made here for the
    same refusals must read the same."""
    if not math.isfinite(f):
        return _rust_float(f)
    text = format(decimal.Decimal(repr(f)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _number(v: object, field: str) -> Optional[_Number]:
    """A number for the core to judge. JSON has no NaN or infinity: those
    are refused here with the core's own words."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise _invalid(field, "must be a number, got a bool")
    try:
        if isinstance(v, (str, bytes, bytearray)):
            raise TypeError
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise _invalid(field, f"must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise _invalid(field, f"must be a positive finite number, got {_rust_float(f)}")
    if isinstance(v, int) and -(2**63) <= v < 2**64:
        return int(v)
    return f


def _path(v: object, field: str, what: str) -> Optional[str]:
    """A path as ``subprocess`` takes ``cwd`` (str, bytes, os.PathLike), as
    the UTF-8 text the protocol carries."""
    if v is None:
        return None
    try:
        raw = os.fsencode(v)  # type: ignore[arg-type]
    except TypeError:
        raise _invalid(field, f"{what}must be str, bytes or os.PathLike, got {_type_name(v)}") from None
    except UnicodeEncodeError as e:
        raise _invalid(
            field, f"{what}cannot be encoded with the filesystem encoding: UnicodeEncodeError: {e}"
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(field, f"{what}is not UTF-8 ({raw!r}); the protocol carries paths as text") from None


def _string_map(v: object, field: str) -> Optional[Dict[str, str]]:
    if v is None:
        return None
    shape = "must be a dict of str to str"
    if not isinstance(v, Mapping):
        raise _invalid(field, f"{shape}, got {_type_name(v)}")
    out: Dict[str, str] = {}
    for k, val in v.items():
        key = _utf8(k, field, f"key {k!r} ")
        if key is None:
            raise _invalid(field, f"{shape}, got key {k!r} of type {_type_name(k)}")
        text = _utf8(val, field, f"value of {k!r} ")
        if text is None:
            raise _invalid(field, f"{shape}, got {_type_name(val)} for {k!r}")
        out[key] = text
    return out


def _limits(v: object, scope: str) -> Optional[Dict[str, _Number]]:
    if v is None:
        return None
    field = f"{scope}.limits"
    if not isinstance(v, Mapping):
        raise _invalid(field, "must be a dict")
    out: Dict[str, _Number] = {}
    for key, val in v.items():
        name = key if isinstance(key, str) else ""
        if name not in _LIMIT_KEYS:
            raise _invalid(
                field,
                f"has an unknown key {json.dumps(name, ensure_ascii=False)} (expected memory_bytes, "
                "processes, cpu_seconds, file_size_bytes or open_files)",
            )
        n = _number(val, f"{scope}.limits.{name}")
        if n is not None:
            out[name] = n
    return out


def _policy(v: object) -> Optional[Dict[str, Any]]:
    field = "request.sandbox_policy"
    if v is None:
        return None
    if isinstance(v, (SandboxPolicy, _NativeSandboxPolicy)):
        return {
            "mode": v.mode,
            "workspace_root": _path(v.workspace_root, field, "workspace_root "),
            "network": v.network,
        }
    if not isinstance(v, Mapping):
        raise _invalid(field, "must be a SandboxPolicy or a dict with 'mode'")
    if "mode" not in v:
        raise _invalid(field, "has no 'mode'")
    out: Dict[str, Any] = {}
    root = _path(v.get("workspace_root"), field, "workspace_root ")
    if root is not None:
        out["workspace_root"] = root
    if v.get("session_id") is not None:
        out["session_id"] = _required_str(v["session_id"], field, "session_id ")
    if v.get("network") is not None:
        out["network"] = _required_str(v["network"], field, "network ")
    out["mode"] = _required_str(v["mode"], field, "mode ")
    return out


def _is_pipe(stdin: object) -> bool:
    if stdin is None or isinstance(stdin, bool):
        return False
    try:
        return operator.index(stdin) == PIPE  # type: ignore[arg-type]
    except TypeError:
        return False


def _config_params(
    cwd: object,
    timeout_ms: object,
    max_timeout_ms: object,
    max_output_bytes: object,
    max_spill_bytes: object,
    grace_ms: object,
    spill_dir: object,
    retain_settled: object,
    sandbox_mode: object,
    limits: object,
) -> Dict[str, Any]:
    """The ``config`` of ``initialize`` and ``reconfigure``: only what was
    given (absent is the core's default), checked in the local order."""
    values: Dict[str, Any] = {
        "cwd": _optional_str(cwd, "config.cwd"),
        "timeout_ms": _number(timeout_ms, "config.timeout_ms"),
        "max_timeout_ms": _number(max_timeout_ms, "config.max_timeout_ms"),
        "max_output_bytes": _number(max_output_bytes, "config.max_output_bytes"),
        "max_spill_bytes": _number(max_spill_bytes, "config.max_spill_bytes"),
        "grace_ms": _number(grace_ms, "config.grace_ms"),
        "spill_dir": _optional_str(spill_dir, "config.spill_dir"),
        "retain_settled": _number(retain_settled, "config.retain_settled"),
        "sandbox_mode": None
        if sandbox_mode is None
        else _required_str(sandbox_mode, "config.sandbox_mode", "mode "),
        "limits": _limits(limits, "config"),
    }
    return {k: v for k, v in values.items() if v is not None}


def _stdin_pieces(data: object) -> List[bytes]:
    """``write_stdin``'s data in pieces that each fit in one message."""
    if isinstance(data, str):
        raw = data.encode("utf-8")
    elif isinstance(data, bytes):
        raw = bytes(data)
    else:
        raise TypeError("data must be str or bytes")
    if not raw:
        return [b""]
    return [raw[i : i + _STDIN_PIECE] for i in range(0, len(raw), _STDIN_PIECE)]


def _id_arg(id: object) -> str:
    if not isinstance(id, str):
        raise TypeError(f"id must be a str, got {_type_name(id)}")
    id.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, as the local face raises
    return str(id)


def _timeout_arg(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, (str, bytes)):
        raise TypeError(f"timeout must be a number of seconds or None, got {_type_name(timeout)}")
    t = float(timeout)
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"timeout must be a non-negative number of seconds, got {_rust_f64(t)}")
    return t


def _argv_list(v: object, field: str) -> List[str]:
    """A program and its arguments, as the local face takes them (a
    sequence of str; a str alone is refused, not split)."""
    if isinstance(v, str):
        raise _invalid(field, "must be a list of str, got a str")
    if not isinstance(v, Sequence):
        raise _invalid(field, f"must be a list of str, got {_type_name(v)}")
    argv: List[str] = []
    for i, item in enumerate(v):
        arg = _utf8(item, field, f"item {i} ")
        if arg is None:
            raise _invalid(field, f"must be a list of str, item {i} is {_type_name(item)}")
        argv.append(arg)
    return argv


def _dimension_number(v: object, field: str) -> float:
    """A terminal dimension's type, checked as the local ``resize`` does
    (the range is :func:`_dimension`'s)."""
    if v is None:
        raise _invalid(field, "must be a number, got None")
    if isinstance(v, bool):
        raise _invalid(field, "must be a number, got a bool")
    try:
        if isinstance(v, (str, bytes, bytearray)):
            raise TypeError
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise _invalid(field, f"must be a number, got {v!r}") from None


def _dimension(f: float, field: str) -> int:
    """The core's rule for rows and columns (a whole number from 1 to
    65535), here because a session whose end was learnt at ``close`` has
    nobody left to ask, and the local face still judges the value first."""
    if not math.isfinite(f) or f <= 0:
        raise _invalid(field, f"must be a positive finite number, got {_rust_f64(f)}")
    if f != math.floor(f):
        raise _invalid(field, f"must be a whole number, got {_rust_f64(f)}")
    if f > 65535:
        raise _invalid(field, f"must be no greater than 65535, got {_rust_f64(f)}")
    return int(f)


def _terminal_pieces(data: object) -> List[Dict[str, str]]:
    """A terminal write's data as ``terminal_write`` params, in pieces that
    each fit in one message (the server writes them in call order). Text
    that fits goes as text, readable in a trace; anything else as base64."""
    field = "terminal.data"
    if isinstance(data, str):
        text = _required_str(data, field, "")
        raw = text.encode("utf-8")
        if len(raw) <= _STDIN_PIECE:
            return [{"data": text}]
    elif isinstance(data, bytes):
        raw = bytes(data)
    else:
        raise _invalid(field, "must be str or bytes")
    if not raw:
        return [{"data_base64": ""}]
    return [
        {"data_base64": base64.b64encode(raw[i : i + _STDIN_PIECE]).decode("ascii")}
        for i in range(0, len(raw), _STDIN_PIECE)
    ]


# Results --------------------------------------------------------------------


def _py_bool(b: bool) -> str:
    return "True" if b else "False"


@dataclass(frozen=True, eq=False)
class SandboxPolicy:
    """A spec's sandbox policy; can be passed back to ``resolve`` as
    ``sandbox_policy``. ``workspace_root`` is a path on the far host."""

    mode: str
    workspace_root: str
    network: str

    def __repr__(self) -> str:
        return (
            f"SandboxPolicy(mode={self.mode!r}, workspace_root={self.workspace_root!r}, "
            f"network={self.network!r})"
        )


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


# Waiting -----------------------------------------------------------------------


def _wait_event(event: threading.Event, timeout: Optional[float]) -> bool:
    """``event.wait(timeout)`` in slices, so that Ctrl-C is seen promptly
    whichever thread the signal was delivered to."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = _SIGNAL_POLL if deadline is None else min(_SIGNAL_POLL, deadline - time.monotonic())
        if step <= 0:
            return event.is_set()
        if event.wait(step):
            return True


_Callback = Callable[[Any, Optional[BaseException]], None]


class _Reply:
    """The answer to one request, for a thread that blocks on it."""

    __slots__ = ("_event", "_value", "_error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None

    def settle(self, value: Any, error: Optional[BaseException]) -> None:
        self._value, self._error = value, error
        self._event.set()

    def wait(self, timeout: Optional[float]) -> bool:
        return _wait_event(self._event, timeout)

    def get(self) -> Any:
        self.wait(None)
        if self._error is not None:
            raise self._error
        return self._value


def _deliver(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]", value: Any, error: Optional[BaseException]) -> None:
    try:
        loop.call_soon_threadsafe(resolve_future, future, value, error)
    except RuntimeError:  # the loop is closed: nobody is waiting
        pass


# Unraisable errors of listeners -------------------------------------------------


class _UnraisableHookArgs(NamedTuple):
    exc_type: Type[BaseException]
    exc_value: BaseException
    exc_traceback: Optional[TracebackType]
    err_msg: Optional[str]
    object: object


def _report_unraisable(exc: BaseException, obj: object) -> None:
    """Reports a listener's exception through ``sys.unraisablehook``, as the
    local executor does. The interpreter's own hook takes only its own
    argument type, which Python code cannot make: that case prints what the
    hook would."""
    hook = sys.unraisablehook
    try:
        if hook is sys.__unraisablehook__:
            print(f"Exception ignored in: {obj!r}", file=sys.stderr)
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        else:
            hook(_UnraisableHookArgs(type(exc), exc, exc.__traceback__, None, obj))  # type: ignore[arg-type]
    except BaseException:
        pass


# Transports ----------------------------------------------------------------------


class _Transport:
    """A byte stream to the server: lines out, lines in, and how it ended."""

    description: str

    def __init__(self) -> None:
        # Writers take turns, so that lines never interleave.
        self.write_lock = threading.Lock()

    def reopen(self) -> Optional["_Transport"]:
        """The same connection made again, for a reconnection: None when it
        cannot be made now but may be soon; TransportError when it cannot
        be made at all."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read_line(self) -> bytes:
        raise NotImplementedError

    def end_input(self) -> None:
        """Our side is done: the server disposes its executor and exits."""
        raise NotImplementedError

    def terminate(self) -> None:
        """Ends the stream now, from our side (a broken protocol, a hang)."""
        raise NotImplementedError

    def ended(self) -> str:
        """After the end of the input: how it ended, for the error message
        (may wait a moment for the transport to exit)."""
        raise NotImplementedError

    def reap(self) -> None:
        """Releases everything; bounded."""
        raise NotImplementedError


class _CommandTransport(_Transport):
    def __init__(self, argv: List[str]) -> None:
        super().__init__()
        self.argv = argv
        self.description = shlex.join(argv)
        try:
            # Its own session: a Ctrl-C at the terminal aborts the run that
            # waits (as locally), it does not kill the connection under it.
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            err = TransportError(f"cannot start the transport {self.description}: {e}")
            err.transport = self.description
            raise err from e
        self._tail = bytearray()
        self._tail_lock = threading.Lock()
        self._stderr = threading.Thread(target=self._drain_stderr, name="dsh-remote-stderr", daemon=True)
        self._stderr.start()

    def _drain_stderr(self) -> None:
        pipe = self._proc.stderr
        assert pipe is not None
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self._tail_lock:
                self._tail += chunk
                del self._tail[:-_STDERR_TAIL_BYTES]

    def stderr_tail(self) -> str:
        with self._tail_lock:
            return bytes(self._tail).decode("utf-8", "replace").strip()

    def reopen(self) -> Optional[_Transport]:
        # A command that cannot be started now will not be later (it is
        # missing, or not executable); one that starts and then fails (ssh
        # with the network down) is tried again by the caller.
        return _CommandTransport(self.argv)

    def write(self, data: bytes) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        pipe.write(data)
        pipe.flush()

    def read_line(self) -> bytes:
        pipe = self._proc.stdout
        assert pipe is not None
        return pipe.readline()

    def end_input(self) -> None:
        pipe = self._proc.stdin
        if pipe is not None and not pipe.closed:
            try:
                pipe.close()
            except OSError:
                pass

    def terminate(self) -> None:
        # The whole process group it leads (a session of its own): a child
        # of the transport (a shell's) would hold its pipes open. Only while
        # it is not reaped, when its pid, the group's id, is still its own.
        if self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def ended(self) -> str:
        try:
            code = self._proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.terminate()
            code = self._proc.wait()
        self._stderr.join(timeout=1)
        if code >= 0:
            how = f"exited with status {code}"
        else:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        tail = self.stderr_tail()
        said = f"; its stderr ends with:\n{tail}" if tail else " (its stderr is empty)"
        return f"the transport `{self.description}` {how}{said}"

    def reap(self) -> None:
        self.end_input()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.terminate()
            self._proc.wait()
        self._stderr.join(timeout=1)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


class _SocketTransport(_Transport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.description = f"unix:{path}"
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            err = TransportError(f"cannot connect to {self.description}: {e}")
            err.transport = self.description
            raise err from e
        self._reader = self._sock.makefile("rb")

    def reopen(self) -> Optional[_Transport]:
        try:
            return _SocketTransport(self.path)
        except TransportError as e:
            # A full listen queue empties; a socket nobody listens at means
            # the server is gone, and the sessions it kept with it.
            if isinstance(e.__cause__, OSError) and e.__cause__.errno == _errno.EAGAIN:
                return None
            raise

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_line(self) -> bytes:
        return self._reader.readline()

    def end_input(self) -> None:
        try:
            self._sock.shutdown(_socket.SHUT_WR)
        except OSError:
            pass

    def terminate(self) -> None:
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    def ended(self) -> str:
        return f"the server at {self.description} closed the connection"

    def reap(self) -> None:
        self.terminate()
        for closer in (self._reader.close, self._sock.close):
            try:
                closer()
            except OSError:
                pass


# The connection ---------------------------------------------------------------------


# Writes that reach a process or terminal in the order they were made: once
# one of them is lost with a connection, the ones queued behind it to the
# same target are not sent (the bytes would arrive out of order).
_ORDERED_WRITES = frozenset({"write_stdin", "close_stdin", "terminal_write"})


class _Pending(NamedTuple):
    method: str
    params: Dict[str, Any]
    callback: _Callback


class _Resumable(NamedTuple):
    """A session the server keeps after its connection ends (``dsh serve
    --linger``), and what this client does to take it back."""

    token: str
    linger_s: float
    # Called on the reader thread once the session is back, with the answer
    # to the resuming initialize; must not wait for an answer itself.
    on_resumed: Callable[[Dict[str, Any]], None]


class _TryAgain(Exception):
    """A reconnection attempt failed in a way the next one may not (the
    transport ended before the answer came, or the server has not seen the
    end of the connection that dropped yet); the message says how."""


class _Refused(Exception):
    """The server will not resume the session (its time passed, or it was
    never made there); the message is the server's."""


# The JSON-RPC error a resume gets while the session is still attached to
# the connection that dropped (its end not seen by the server yet): the
# next attempt, a moment later, succeeds.
_INVALID_REQUEST = -32600


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Connection:
    """JSON-RPC over a transport: requests out, answers matched to their
    callers by id, notifications handed on, and one failure for everything
    pending when the stream ends. One reader thread; writers take turns.

    Where the session lingers (``resume_with``), an end nobody asked for is
    not the end: the reader starts the transport again and resumes the
    session, while lines wait in the outbox, then sorts the calls that were
    on their way by what the server says it still owes (``_resumed``)."""

    def __init__(
        self,
        transport: _Transport,
        on_notification: Callable[[str, Dict[str, Any]], None],
        on_lost: Callable[[BaseException], None],
    ) -> None:
        self.transport = transport
        self._on_notification = on_notification
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, _Pending] = {}
        self._failure: Optional[BaseException] = None
        self._closing = False
        # False while the connection is being made again: lines wait in the
        # outbox (with their request's id; None for a notification), and go
        # out in order after the resume, before any new one.
        self._live = True
        self._outbox: List[Tuple[Optional[int], bytes]] = []
        # Lines whose write failed (the transport was dead) since the last
        # resume: never taken, since the server takes no line it did not
        # get whole, so they go out again after the next resume.
        self._unsent: List[Tuple[Optional[int], bytes]] = []
        # How many resumes sorted the calls on their way: a write that fails
        # after a resume already sorted its call is no longer for _unsent.
        self._resumes = 0
        self._resumable: Optional[_Resumable] = None
        # Set by shutdown: the pause between two reconnection attempts ends.
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="dsh-remote-reader", daemon=True)
        self._reader.start()

    @property
    def failure(self) -> Optional[BaseException]:
        return self._failure

    def resume_with(self, resumable: _Resumable) -> None:
        """From now on an unexpected end is followed by a reconnection."""
        self._resumable = resumable

    def _transport_error(self, message: str) -> TransportError:
        e = TransportError(message)
        e.transport = self.transport.description
        return e

    def request(
        self,
        method: str,
        params: Dict[str, Any],
        callback: _Callback,
        *,
        oversize_field: Optional[str] = None,
    ) -> None:
        """Sends a request; ``callback(result, error)`` is called once, on
        the reader thread (or here, if the connection is already gone)."""
        with self._lock:
            failure = self._failure
            id = next(self._ids)
        if failure is not None:
            raise _fresh(failure)
        line = _encode({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        if len(line) - 1 > _MAX_MESSAGE_BYTES:
            field = oversize_field or method
            raise _invalid(
                field,
                f"makes a {method} message of {len(line) - 1} bytes, more than the "
                f"{_MAX_MESSAGE_BYTES} one message may hold (send large input through "
                "stdin=PIPE and Process.write_stdin, which goes in pieces)",
            )
        with self._lock:
            if self._failure is not None:
                raise _fresh(self._failure)
            self._pending[id] = _Pending(method, params, callback)
            route = self._route(id, line)
        if route is not None:
            self._write_line(route, id, line)

    def notify(self, method: str, params: Dict[str, Any]) -> None:
        """Sends a notification (no answer, not even an error)."""
        line = _encode({"jsonrpc": "2.0", "method": method, "params": params})
        with self._lock:
            if self._failure is not None:
                return
            route = self._route(None, line)
        if route is not None:
            self._write_line(route, None, line)

    def _route(self, id: Optional[int], line: bytes) -> Optional[Tuple[_Transport, int]]:
        """Where one message (``id``: its request's, None for a
        notification) goes now (lock held): the transport, with the count of
        resumes so far; or None, kept in the outbox while the connection is
        being made again."""
        if self._live:
            return self.transport, self._resumes
        self._outbox.append((id, line))
        return None

    def _write_line(self, route: Tuple[_Transport, int], id: Optional[int], line: bytes) -> None:
        transport, resumes = route
        if self._write(transport, line):
            return
        with self._lock:
            # Not sorted by a resume yet: it goes out again after the next.
            if self._resumable is not None and self._resumes == resumes and self._failure is None:
                self._unsent.append((id, line))

    def _write(self, transport: _Transport, data: bytes) -> bool:
        """False when the transport is gone (it is ended from here): the
        reader sees its end and fails every pending call with how the
        transport ended, or reconnects and sorts them out."""
        try:
            with transport.write_lock:
                transport.write(data)
            return True
        except (OSError, ValueError):
            transport.terminate()
            return False

    def _read_loop(self) -> None:
        while True:
            failure = self._read_to_end()
            if failure is None:
                resumable = self._resumable
                if self._closing:
                    failure = DisposedError(_DISPOSED)
                elif resumable is None:
                    failure = self._transport_error(self.transport.ended())
                else:
                    try:
                        failure = self._reconnect(resumable)
                    except Exception as e:  # a bug here: never a silent hang
                        failure = self._transport_error(f"reconnecting to `{self.transport.description}` failed: {e!r}")
                    if failure is None:
                        continue
            break
        with self._lock:
            if self._failure is None:
                self._failure = failure
            pending = list(self._pending.values())
            self._pending.clear()
            self._outbox.clear()
            self._unsent.clear()
        for p in pending:
            self._call_back(p.callback, None, _fresh(failure))
        try:
            self._on_lost(failure)
        except BaseException as e:
            _report_unraisable(e, self._on_lost)

    def _read_to_end(self) -> Optional[BaseException]:
        """Takes the transport's lines until it ends: None then; else why
        the stream cannot be read any more (it is ended from here)."""
        transport = self.transport
        try:
            while True:
                line = transport.read_line()
                if not line:
                    return None
                if line.strip():
                    self._dispatch(line)
        except ProtocolError as e:
            transport.terminate()
            return e
        except Exception as e:  # a read error, or a bug here: never a silent hang
            failure = self._transport_error(f"reading from the transport `{transport.description}` failed: {e!r}")
            transport.terminate()
            return failure

    # -- reconnecting

    def _reconnect(self, resumable: _Resumable) -> Optional[BaseException]:
        """The transport ended, not by our hand, while the server keeps the
        session: makes the connection again and resumes the session, trying
        again after a pause (doubling, up to a most) until the session's
        linger time has passed since the loss. None once resumed; else the
        failure for everything pending."""
        deadline = time.monotonic() + resumable.linger_s
        with self._lock:
            self._live = False
        lost = self.transport
        how = lost.ended()
        lost.reap()
        pause = _RECONNECT_FIRST_S
        last = "it could not be made yet"
        while True:
            if self._closing:
                return DisposedError(_DISPOSED)
            try:
                attempt = lost.reopen()
            except TransportError as e:
                return self._transport_error(f"{how}; it cannot be started again to resume the session: {e}")
            if attempt is not None:
                with self._lock:
                    self.transport = attempt  # so that shutdown ends it
                if self._closing:
                    attempt.reap()
                    return DisposedError(_DISPOSED)
                try:
                    answer = self._resume_on(attempt, resumable.token, deadline)
                except _TryAgain as e:
                    last = str(e)
                    attempt.reap()
                except (_Refused, ProtocolError) as e:
                    attempt.reap()
                    return self._transport_error(f"{how}; the server did not resume the session: {e}")
                else:
                    self._resumed(attempt, answer, how, resumable)
                    return None
            left = deadline - time.monotonic()
            if left <= 0:
                return self._transport_error(
                    f"{how}; the session could not be resumed within the {resumable.linger_s:g} s "
                    f"the server keeps it; the last attempt: {last}"
                )
            self._stop.wait(min(pause, left))
            pause = min(pause * 2, _RECONNECT_MOST_S)

    def _resume_on(self, attempt: _Transport, token: str, deadline: float) -> Dict[str, Any]:
        """Sends ``initialize {resume}`` on a new transport and takes its
        answer, the first thing the server sends (what it kept follows).
        The attempt is ended at the deadline, however far it got."""
        id = next(self._ids)
        params = {"protocol_version": PROTOCOL_VERSION, "resume": token, "client": _CLIENT}
        # Ended at the deadline: ssh to a host that does not answer hangs.
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), attempt.terminate)
        watchdog.daemon = True
        watchdog.start()
        try:
            self._write(attempt, _encode({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params}))
            while True:
                try:
                    line = attempt.read_line()
                except OSError as e:
                    raise _TryAgain(f"reading from `{attempt.description}` failed: {e!r}") from None
                if not line:
                    raise _TryAgain(attempt.ended())
                if not line.strip():
                    continue
                try:
                    message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
                except (UnicodeDecodeError, ValueError):
                    message = None
                if isinstance(message, dict) and message.get("id") == id and "method" not in message:
                    break
                self._dispatch(line)  # anything else, as always (the server sends nothing before)
        finally:
            watchdog.cancel()
        error = message.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            if isinstance(error, dict) and error.get("code") == _INVALID_REQUEST:
                raise _TryAgain(f"the server said: {said}")
            raise _Refused(said)
        with _Shape("initialize"):
            info = _obj(message["result"])
            session = _obj(info["session"])
            if session["resumed"] is not True:
                raise ValueError("the session was not resumed")
            if not isinstance(session["pending"], list):
                raise TypeError("session.pending is not a list")
        return info

    def _hold_writes_behind(self, lost: List[_Pending]) -> List[_Pending]:
        """Takes out of the queues (under the lock) the writes waiting to go
        to a target one of the ``lost`` writes was for, and returns them."""
        broken = {p.params.get("id") for p in lost if p.method in _ORDERED_WRITES}
        if not broken:
            return []

        def behind(id: Optional[int]) -> bool:
            p = self._pending.get(id) if id is not None else None
            return p is not None and p.method in _ORDERED_WRITES and p.params.get("id") in broken

        held: List[_Pending] = []
        for queue in (self._unsent, self._outbox):
            ids = [id for id, _ in queue if behind(id)]
            queue[:] = [(id, line) for id, line in queue if id not in ids]
            held.extend(self._pending.pop(id) for id in ids if id is not None)
        return held

    def _resumed(self, transport: _Transport, info: Dict[str, Any], how: str, resumable: _Resumable) -> None:
        """The session is back on ``transport``. A call that was on its way
        waits on when the server says it still owes the answer (``pending``);
        one that only reads is asked again; any other fails with AnswerLost.
        Then what never got through and what waited for the connection go
        out, in order, before any new line."""
        owed = {id for id in info["session"]["pending"] if _is_id(id)}
        lost: List[_Pending] = []
        lines: List[bytes] = []
        with self._lock:
            waiting = {id for id, _ in self._outbox + self._unsent if id is not None}
            for id, p in list(self._pending.items()):
                if id in owed or id in waiting:
                    continue
                if p.method in _READING_METHODS:
                    lines.append(_encode({"jsonrpc": "2.0", "id": id, "method": p.method, "params": p.params}))
                else:
                    lost.append(self._pending.pop(id))
            held = self._hold_writes_behind(lost)
            lines.extend(line for _, line in self._unsent)
            self._unsent.clear()
            self._resumes += 1
        while True:
            with self._lock:
                lines.extend(line for _, line in self._outbox)
                self._outbox.clear()
                if not lines:
                    self._live = True
                    break
            self._write(transport, b"".join(lines))
            lines = []
        def fail(p: _Pending, message: str) -> None:
            e = AnswerLost(message)
            e.transport = transport.description
            e.method = p.method
            self._call_back(p.callback, None, e)

        for p in lost:
            fail(
                p,
                f"the connection to the server dropped before the answer to {p.method} came ({how}); "
                f"the session was resumed, but {p.method} may have taken effect or not",
            )
        for p in held:
            fail(
                p,
                f"{p.method} was not sent: an earlier write to {p.params.get('id')!r} was lost with the "
                f"connection ({how}), and this one would have reached it out of order",
            )
        try:
            resumable.on_resumed(info)
        except BaseException as e:
            _report_unraisable(e, resumable.on_resumed)

    # -- what the server sends

    def _broken(self, what: str, line: bytes) -> ProtocolError:
        e = ProtocolError(
            f"the server behind `{self.transport.description}` broke the protocol: {what}: {_excerpt(line)}"
        )
        e.transport = self.transport.description
        return e

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as e:
            raise self._broken(f"a line that is not JSON ({e})", line) from None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise self._broken("a line that is not a JSON-RPC 2.0 message", line)
        if "method" in message:
            params = message.get("params", {})
            if "id" in message or not isinstance(message["method"], str) or not isinstance(params, dict):
                raise self._broken("a request or a malformed notification (it only answers and notifies)", line)
            try:
                self._on_notification(message["method"], params)
            except (KeyError, TypeError, ValueError) as e:
                raise self._broken(f"a notification of the wrong shape ({e!r})", line) from None
            return
        id = message.get("id")
        if id is None:
            error = message.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            raise self._broken(f"it could not read a message from this client ({said})", line)
        with self._lock:
            pending = self._pending.pop(id, None) if _is_id(id) else None
        if pending is None:
            raise self._broken("an answer to a request this client did not send", line)
        if "error" in message:
            self._call_back(pending.callback, None, _error_from_rpc(message["error"], pending.method, pending.params))
        elif "result" in message:
            self._call_back(pending.callback, message["result"], None)
        else:
            self._call_back(
                pending.callback, None, self._broken(f"an answer to {pending.method} without result or error", line)
            )

    @staticmethod
    def _call_back(callback: _Callback, value: Any, error: Optional[BaseException]) -> None:
        try:
            callback(value, error)
        except BaseException as e:  # never lose the reader thread to a callback
            _report_unraisable(e, callback)

    def shutdown(self) -> None:
        """Ends the connection from our side, waits (bounded) for the server
        to finish and the reader to see the end, and releases the transport."""
        self._closing = True
        self._stop.set()
        transport = self.transport
        try:
            with transport.write_lock:
                transport.end_input()
        except Exception:
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=10)
            if self._reader.is_alive():
                self.transport.terminate()
                self._reader.join(timeout=5)
        self.transport.reap()

    def abandon(self) -> None:
        """Ends the connection without waiting (from a finalizer, which may
        run on any thread, the reader's included)."""
        self._closing = True
        self._stop.set()
        threading.Thread(target=self.shutdown, name="dsh-remote-close", daemon=True).start()


def _encode(message: Dict[str, Any]) -> bytes:
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text + "\n").encode("utf-8")


# Processes -------------------------------------------------------------------------


class _ProcState:
    """What this client knows of one background process, shared by every
    handle to it: its last snapshot, whether it has settled, who waits for
    that, and (once the executor is closed) its output not yet read."""

    __slots__ = (
        "lock", "snapshot", "settled", "failure", "wait_sent", "async_waiters", "final_read", "announced",
        "__weakref__",
    )  # fmt: skip

    def __init__(self, snapshot: Dict[str, Any]) -> None:
        self.lock = threading.Lock()
        self.snapshot = snapshot
        self.settled = threading.Event()
        self.failure: Optional[BaseException] = None
        self.wait_sent = False
        self.async_waiters: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self.final_read: Optional[ProcessRead] = None
        # Handed to the task-done listeners (from its task_done, or from a
        # refresh after a reconnection that found it settled): once only.
        self.announced = False
        if snapshot["settled"]:
            self.settled.set()

    @property
    def id(self) -> str:
        return str(self.snapshot["id"])

    def update(self, snapshot: Dict[str, Any]) -> None:
        with self.lock:
            if self.snapshot["settled"] and not snapshot["settled"]:
                return  # never back from settled (an older answer arriving late)
            self.snapshot = snapshot
            if not snapshot["settled"]:
                return
            waiters, self.async_waiters = self.async_waiters, []
        self.settled.set()
        for loop, future in waiters:
            _deliver(loop, future, None, None)

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.snapshot["settled"] or self.failure is not None:
                return
            self.failure = error
            waiters, self.async_waiters = self.async_waiters, []
        self.settled.set()
        for loop, future in waiters:
            _deliver(loop, future, None, _fresh(error))

    def take_final_read(self) -> ProcessRead:
        with self.lock:
            read, self.final_read = self.final_read, None
        return read if read is not None else _NOTHING_READ

    def announce(self) -> bool:
        """True the first time: the listeners are to hear of it now."""
        with self.lock:
            first, self.announced = not self.announced, True
        return first


class _ReadCursor:
    """Where this client's next read of one process's output starts in
    each stream (whole-stream byte offsets), when it reads by offset: a
    read whose answer a dropped connection lost is asked again from the
    same place, so nothing is lost or read twice. Kept by id for as long as
    the server keeps the process, whoever holds a handle to it."""

    __slots__ = ("lock", "stdout", "stderr")

    def __init__(self, stdout: int, stderr: int) -> None:
        # The two offsets move together, and only from where a read began.
        self.lock = threading.Lock()
        self.stdout = stdout
        self.stderr = stderr


class Process:
    """A background process on the far side, from ``start``, ``get``,
    ``list`` or a task-done listener. Every handle to one process shares
    its status and its read cursor. A fact that can change (``status``,
    ``done``, ``exit_code``, …) is asked of the server while the process
    runs, so it is as live as the local one; once settled it is final and
    answered here."""

    __slots__ = ("_remote", "_state")

    def __init__(self, remote: "_Remote", state: _ProcState) -> None:
        self._remote = remote
        self._state = state

    def _now(self) -> Dict[str, Any]:
        return self._remote.current(self._state)

    @property
    def id(self) -> str:
        return self._state.id

    @property
    def command(self) -> str:
        return str(self._state.snapshot["command"])

    @property
    def owner(self) -> Optional[str]:
        owner = self._state.snapshot.get("owner")
        return None if owner is None else str(owner)

    @property
    def status(self) -> Literal["running", "completed", "killed"]:
        """Live: ``'killed'`` as soon as a stop was requested."""
        s = self._now()["status"]
        return "completed" if s == "completed" else "killed" if s == "killed" else "running"

    @property
    def exit_code(self) -> Optional[int]:
        return _opt_int(self._now().get("exit_code"))

    @property
    def signal(self) -> Optional[str]:
        return _opt_str(self._now().get("signal"))

    @property
    def exit_status_unavailable(self) -> bool:
        return bool(self._now().get("exit_status_unavailable", False))

    @property
    def survivors(self) -> int:
        return int(self._now().get("survivors", 0))

    @property
    def sandbox(self) -> Optional[SandboxInfo]:
        return _sandbox_info(self._now().get("sandbox"))

    @property
    def limit(self) -> Optional[Literal["memory", "processes", "cpu", "file_size"]]:
        limit = self._now().get("limit")
        return limit if limit in ("memory", "processes", "cpu", "file_size") else None

    @property
    def limits_enforcement(self) -> Dict[str, str]:
        return dict(self._now().get("limits_enforcement") or {})

    @property
    def done(self) -> bool:
        return bool(self._now()["settled"])

    @property
    def has_stdin_pipe(self) -> bool:
        return bool(self._state.snapshot.get("has_stdin_pipe", False))

    def read_output(self) -> ProcessRead:
        """Consuming read, as locally; after the executor is closed, what
        was left unread when it closed (fetched then), once."""
        return self._remote.read_output_of(self._state)

    def kill(self) -> bool:
        """Begins termination; True when it was running and this call began it."""
        return self._remote.kill_of(self._state)

    def write_stdin(self, data: Union[str, bytes]) -> None:
        """Writes all of ``data`` to the command's stdin; returns once the
        far side's bounded buffer took every byte (back-pressure: a command
        that does not read holds the writer). Ctrl-C stops the wait, but
        what was sent is written when the command reads."""
        pieces = _stdin_pieces(data)
        self._remote.refuse_blocking()
        replies = [self._remote.stdin_write(self._state, piece) for piece in pieces]
        for reply in replies:
            reply.get()

    def write_stdin_async(self, data: Union[str, bytes]) -> "asyncio.Future[None]":
        """An asyncio future that completes once every byte of ``data`` was
        taken (back-pressure), in call order with other writes."""
        pieces = _stdin_pieces(data)
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        left = [len(pieces)]
        lock = threading.Lock()

        def one(value: Any, error: Optional[BaseException]) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if error is not None:
                _deliver(loop, future, None, error)
            elif last:
                _deliver(loop, future, None, None)

        try:
            for piece in pieces:
                self._remote.stdin_write(self._state, piece, one)
        except BaseException as e:
            future.set_exception(e)
        return future

    def close_stdin(self) -> bool:
        """Closes the command's stdin once what was written is delivered.
        True when this call closed it."""
        return self._remote.close_stdin_of(self._state)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the process settles; TimeoutError after ``timeout``
        seconds (None: no limit). Ctrl-C interrupts the wait, not the process."""
        t = _timeout_arg(timeout)
        self._remote.refuse_blocking()
        st = self._state
        if not st.settled.is_set():
            self._remote.watch(st)
            if not _wait_event(st.settled, t):
                raise TimeoutError(f"{st.id} is still running")
        if not st.snapshot["settled"] and st.failure is not None:
            raise _fresh(st.failure)

    def wait_async(self) -> "asyncio.Future[None]":
        """An asyncio future that completes when the process settles.
        Cancelling it (``asyncio.wait_for`` timing out) leaves nothing behind:
        one wait per process is in flight, however many futures poll."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        st = self._state
        with st.lock:
            if st.snapshot["settled"]:
                future.set_result(None)
                return future
            if st.failure is not None:
                future.set_exception(_fresh(st.failure))
                return future
            st.async_waiters.append((loop, future))

        def withdraw(f: "asyncio.Future[None]") -> None:
            if f.cancelled():
                with st.lock:
                    st.async_waiters = [w for w in st.async_waiters if w[1] is not f]

        future.add_done_callback(withdraw)
        try:
            self._remote.watch(st)
        except BaseException as e:
            st.fail(e)
        return future

    def __repr__(self) -> str:
        # From what is known here: a repr never waits on the network.
        s = self._state.snapshot
        return f"Process(id={s['id']!r}, status={s['status']!r}, exit_code={s.get('exit_code')!r}, signal={s.get('signal')!r})"


class Unsubscribe:
    """Returned by ``Executor.on_task_done``: calling it removes the listener."""

    __slots__ = ("_remote", "_id")

    def __init__(self, remote: "_Remote", id: int) -> None:
        self._remote = remote
        self._id = id

    def __call__(self) -> bool:
        """True if the listener was registered; False on later calls."""
        with self._remote.lock:
            return self._remote.listeners.pop(self._id, None) is not None


# Terminal sessions ---------------------------------------------------------------------

# A long-poll that waits until there is output, however long: a value past
# what any clock counts, which the server reads as no limit.
_FOREVER_MS = 1e300

# A timeout longer than this (about 31 years) is waited as none, and not
# sent: the server's clock overflows on some longer ones (past ~9.2e18 s).
_FOREVER_S = 1e9

_TERMINAL_SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP")

# The core's words when a session cannot take a call, for a session whose
# end was learnt at ``close``: nobody is left on the far side to say them.
_INPUT_GONE = "the terminal's program has exited: its input cannot be written"
_RESIZE_GONE = "the terminal session has ended: it cannot be resized"
_NO_FOREGROUND = "the terminal has no foreground process group (its program has exited)"

# How long ``close`` goes on reading what disposed sessions printed last
# (their output ends as soon as the kernel reports the hangup: at once).
_KEEP_OUTPUT_S = 10.0


@dataclass(frozen=True, eq=False)
class Foreground:
    """A terminal's foreground process group, and whether the kernel of the
    far host shows it blocked reading the terminal (docs/terminals.md)."""

    process_group_id: int
    input_waiting: bool

    def __repr__(self) -> str:
        waiting = _py_bool(self.input_waiting)
        return f"Foreground(process_group_id={self.process_group_id}, input_waiting={waiting})"


def _term_snapshot(v: Any) -> Dict[str, Any]:
    """A terminal as the server sent it, its facts checked once here."""
    o = _obj(v)
    _str(o["id"])
    _int(o["pid"])
    _bool(o["exited"])
    _opt_int(o.get("exit_code"))
    _opt_str(o.get("signal"))
    _bool(o.get("exit_status_unavailable", False))
    _int(o.get("survivors", 0))
    _bool(o.get("output_ended", False))
    return o


def _request_field(e: InvalidArgumentError) -> InvalidArgumentError:
    """The server names a terminal request's fields ``terminal.*`` where its
    own parser refuses them; the local face (and the core) say
    ``request.*``: the same refusal, named as the local face names it."""
    field = e.field
    if not (isinstance(field, str) and field.startswith("terminal.")):
        return e
    local = "request." + field[len("terminal.") :]
    message = str(e)
    if message.startswith(field):
        message = local + message[len(field) :]
    renamed = InvalidArgumentError(message)
    renamed.field = local
    return renamed


_Handout = Tuple[asyncio.AbstractEventLoop, "asyncio.Future[str]", Optional[str], Optional[BaseException]]


class _TermState:
    """What this client knows of one terminal session: its last snapshot,
    and the output taken from the server but not yet by a reader.

    Every ``terminal_read`` of a session goes through here, one at a time:
    the server answers a long-poll when output arrives, so two reads in
    flight could have their answers cross and the text arrive out of
    order. A read's text goes to ``unread`` first, whoever asked: a reader
    that gave up (a timeout, Ctrl-C, a cancelled ``__anext__``) leaves what
    its read brings to the next reader, so nothing is lost; and nothing is
    asked of the server while nobody reads, so its back-pressure holds."""

    __slots__ = (
        "id", "lock", "changed", "snapshot", "exited", "unread", "ended", "reading", "reads_sent",
        "reads_done", "failure", "lost", "final", "output_waiters", "exit_waiters", "watch_sent",
        "write_lock", "__weakref__",
    )  # fmt: skip

    def __init__(self, id: str) -> None:
        self.id = id
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.snapshot: Dict[str, Any] = {"id": id, "pid": 0, "exited": False}
        # Set once the program exited (or the connection failed): wakes waiters.
        self.exited = threading.Event()
        self.unread: List[str] = []
        # The server said the output ended and every byte was read.
        self.ended = False
        self.reading = False
        self.reads_sent = 0
        self.reads_done = 0
        self.failure: Optional[BaseException] = None
        # A read's answer went with a dropped connection (AnswerLost): the
        # next reader is told, once, and the session goes on.
        self.lost: Optional[BaseException] = None
        # Closed: the facts and the output were kept at the close; nothing
        # more is asked of the server.
        self.final = False
        self.output_waiters: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[str]"]] = []
        self.exit_waiters: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self.watch_sent = False
        # Held while one write sends its pieces: a write reaches the terminal
        # whole, as a local one does, whatever other threads write.
        self.write_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return int(self.snapshot["pid"])

    @property
    def over(self) -> bool:
        """No more output will come: read to the end, or kept at the close."""
        return self.ended or self.final

    def update(self, snapshot: Dict[str, Any]) -> None:
        with self.lock:
            if self.snapshot["exited"] and not snapshot["exited"]:
                return  # never back from exited (an older answer arriving late)
            self.snapshot = snapshot
            if not snapshot["exited"]:
                return
            waiters, self.exit_waiters = self.exit_waiters, []
        self.exited.set()
        for loop, future in waiters:
            _deliver(loop, future, None, None)

    def fail(self, error: BaseException) -> None:
        """The connection is gone: every waiter gets ``error``, once what
        was already taken has been read."""
        with self.lock:
            if self.final or self.failure is not None:
                return
            self.failure = error
            handouts = self.serve()
            waiters, self.exit_waiters = self.exit_waiters, []
            self.changed.notify_all()
        self.exited.set()
        self.hand(handouts)
        for loop, future in waiters:
            _deliver(loop, future, None, _fresh(error))

    def take(self) -> str:
        """What was taken from the server and not read yet (lock held)."""
        text = "".join(self.unread)
        self.unread.clear()
        return text

    def taken_or_failure(self) -> str:
        with self.lock:
            text = self.take()
            if not text and not self.over:
                if self.lost is not None:
                    lost, self.lost = self.lost, None
                    raise lost
                if self.failure is not None:
                    raise _fresh(self.failure)
        return text

    def serve(self) -> List[_Handout]:
        """Hands what there is to the async readers waiting (lock held):
        the text to the first, the end (or the failure) to all once the
        text is read. Delivered by :meth:`hand`, outside the lock."""
        out: List[_Handout] = []
        while self.output_waiters:
            if self.unread:
                loop, future = self.output_waiters.pop(0)
                out.append((loop, future, self.take(), None))
            elif self.over:
                loop, future = self.output_waiters.pop(0)
                out.append((loop, future, None, StopAsyncIteration()))
            elif self.lost is not None:
                loop, future = self.output_waiters.pop(0)
                out.append((loop, future, None, self.lost))
                self.lost = None
            elif self.failure is not None:
                loop, future = self.output_waiters.pop(0)
                out.append((loop, future, None, _fresh(self.failure)))
            else:
                break
        return out

    def hand(self, handouts: List[_Handout]) -> None:
        for loop, future, text, error in handouts:
            if text is None:
                _deliver(loop, future, None, error)
                continue
            try:
                loop.call_soon_threadsafe(self._settle_text, future, text)
            except RuntimeError:  # the loop is closed: the text waits for another reader
                self.put_back(text)

    def _settle_text(self, future: "asyncio.Future[str]", text: str) -> None:
        # On the future's loop. Cancelled meanwhile (asyncio.wait_for timed
        # out): the text is not lost, it goes back for the next reader.
        if future.done():
            self.put_back(text)
        else:
            future.set_result(text)

    def put_back(self, text: str) -> None:
        with self.lock:
            self.unread.insert(0, text)
            handouts = self.serve()
            self.changed.notify_all()
        self.hand(handouts)

    def begin_read(self) -> int:
        """Marks a read in flight (lock held); its number."""
        self.reading = True
        self.reads_sent += 1
        return self.reads_sent

    def wait_reads(self, upto: int) -> None:
        """Until the reads numbered up to ``upto`` were answered (lock
        held). Bounded: a read answers at once or when output comes, and
        a lost connection answers every read with its failure."""
        while self.reads_done < upto:
            self.changed.wait(_SIGNAL_POLL)


class Terminal:
    """A terminal session on the far side (``Executor.spawn_terminal``): a
    program leading a new session whose controlling terminal is a
    pseudo-terminal there, with the local ``Terminal``'s members.

    Output: ``read_output()`` (what is there), ``read(timeout)`` (waits for
    some), or ``async for chunk in terminal``; all take from one cursor,
    never the same text twice, never split inside a UTF-8 character. The
    server holds the unread output (bounded by ``max_output_bytes``, beyond
    which the program waits for a reader) and sends it only when a reader
    asks. A fact that can change (``exited``, ``survivors``, …) is asked of
    the server until it is final. After the executor is closed, the handle
    answers from what the close kept: the final facts and the last output."""

    __slots__ = ("_remote", "_state")

    def __init__(self, remote: "_Remote", state: _TermState) -> None:
        self._remote = remote
        self._state = state

    # -- facts

    @property
    def pid(self) -> int:
        """The program's pid on the far host: the session's leader, and its group id."""
        return self._state.pid

    @property
    def exited(self) -> bool:
        """True once the program has exited."""
        return bool(self._remote.term_now(self._state, live=False)["exited"])

    @property
    def exit_code(self) -> Optional[int]:
        """The program's exit code; None while it runs or when a signal ended it."""
        return _opt_int(self._remote.term_now(self._state, live=False).get("exit_code"))

    @property
    def signal(self) -> Optional[str]:
        """The signal that ended the program (``'SIGHUP'``), if one did."""
        return _opt_str(self._remote.term_now(self._state, live=False).get("signal"))

    @property
    def exit_status_unavailable(self) -> bool:
        """True when the program ended but nobody could say how."""
        return bool(self._remote.term_now(self._state, live=False).get("exit_status_unavailable", False))

    @property
    def survivors(self) -> int:
        """After ``terminate()`` or close: members of the session still
        alive when the stop finished (expected: 0)."""
        return int(self._remote.term_now(self._state, live=True).get("survivors", 0))

    @property
    def output_ended(self) -> bool:
        """True once the output has ended and everything was read (takes
        nothing: what the server says is checked against the reads still
        on their way, so unread text is never reported as the end)."""
        return self._remote.term_output_ended(self._state)

    # -- output

    def read_output(self) -> str:
        """Consuming read: the output since the previous read ('' if
        none). Asks the server unless a read is on its way already (then
        what has arrived is what there is)."""
        self._remote.check_here()
        return self._remote.term_read_now(self._state)

    def read(self, timeout: Optional[float] = None) -> str:
        """Waits until there is output, it has ended, or ``timeout`` seconds
        passed (None: no limit), and takes what there is ('' at the end or
        on timeout). The wait is a long-poll on the server; Ctrl-C stops
        this call, and what the poll brings later goes to the next read."""
        t = _timeout_arg(timeout)
        self._remote.check_here()
        if t == 0:
            return self._remote.term_read_now(self._state)
        self._remote.refuse_blocking()
        deadline = None if t is None or t > _FOREVER_S else time.monotonic() + t
        self._remote.term_await_output(self._state, deadline, keep=False)
        return self._state.taken_or_failure()

    def __aiter__(self) -> "Terminal":
        return self

    def __anext__(self) -> "asyncio.Future[str]":
        """The next chunk of output; StopAsyncIteration once it has ended."""
        self._remote.check_here()
        return self._remote.term_next(self._state)

    # -- input

    def write(self, data: Union[str, bytes]) -> None:
        """Writes ``data`` (str as UTF-8, or bytes) to the terminal's input
        as typed, and returns once the terminal took all of it (a program
        that does not read holds the writer). TerminalClosedError once the
        program has exited. Ctrl-C stops the wait, not the write."""
        pieces = _terminal_pieces(data)
        r = self._remote
        r.check_here()
        if self._state.final:
            raise TerminalClosedError(_INPUT_GONE)
        r.refuse_blocking()
        for reply in r.term_write(self._state, pieces):
            reply.get()

    def write_async(self, data: Union[str, bytes]) -> "asyncio.Future[None]":
        """``write`` as an awaitable that never blocks the event loop."""
        pieces = _terminal_pieces(data)
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        r = self._remote
        r.check_here()
        if self._state.final:
            future.set_exception(TerminalClosedError(_INPUT_GONE))
            return future
        left = [len(pieces)]
        lock = threading.Lock()

        def one(value: Any, error: Optional[BaseException]) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if error is not None:
                _deliver(loop, future, None, error)
            elif last:
                _deliver(loop, future, None, None)

        try:
            r.term_write(self._state, pieces, one)
        except BaseException as e:
            future.set_exception(e)
        return future

    def resize(self, rows: _Number, cols: _Number) -> None:
        """Changes the window size (rows and columns, 1 to 65535); the
        foreground group gets SIGWINCH."""
        f_rows = _dimension_number(rows, "terminal.rows")
        f_cols = _dimension_number(cols, "terminal.cols")
        params = {
            "id": self._state.id,
            "rows": _dimension(f_rows, "terminal.rows"),
            "cols": _dimension(f_cols, "terminal.cols"),
        }
        r = self._remote
        r.check_here()
        if self._state.final:
            raise TerminalClosedError(_RESIZE_GONE)
        r.call("terminal_resize", params)

    # -- the foreground

    def inspect_foreground(self) -> Optional[Foreground]:
        """The foreground process group and whether the far kernel shows it
        waiting for input; None once the program has exited."""
        r = self._remote
        r.check_here()
        if self._state.final:
            return None
        value = r.call("terminal_inspect_foreground", {"id": self._state.id})
        with _Shape("terminal_inspect_foreground"):
            fg = value["foreground"]
            if fg is None:
                return None
            fg = _obj(fg)
            return Foreground(
                process_group_id=_int(fg["process_group_id"]), input_waiting=_bool(fg["input_waiting"])
            )

    def wait_input_waiting(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the far kernel shows the foreground group waiting
        for input, ``timeout`` seconds passed (None: no limit), or the
        program exited; returns whether it is waiting. Right after a write
        it is True only once the program took what was written and waits
        again. The server does the watching: one round trip."""
        t = _timeout_arg(timeout)
        r = self._remote
        r.check_here()
        if self._state.final:
            return False
        if t != 0:
            r.refuse_blocking()
        params: Dict[str, Any] = {"id": self._state.id}
        if t is not None and t <= _FOREVER_S:
            params["timeout_ms"] = t * 1000
        value = r.call("terminal_wait_input_waiting", params)
        with _Shape("terminal_wait_input_waiting"):
            return _bool(value["waiting"])

    def signal_foreground(self, signal: Literal["SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP"]) -> int:
        """Sends ``signal`` (``'SIGINT'``, ``'SIGTERM'``, ``'SIGKILL'``,
        ``'SIGTSTP'`` or ``'SIGHUP'``) to the foreground process group and
        returns that group's id. TerminalClosedError when there is none."""
        name = _required_str(signal, "terminal.signal", "")
        r = self._remote
        r.check_here()
        if self._state.final:
            if name not in _TERMINAL_SIGNALS:
                raise _invalid(
                    "terminal.signal",
                    f"must be one of {', '.join(_TERMINAL_SIGNALS)}, got {json.dumps(name, ensure_ascii=False)}",
                )
            raise TerminalClosedError(_NO_FOREGROUND)
        value = r.call("terminal_signal_foreground", {"id": self._state.id, "signal": name})
        with _Shape("terminal_signal_foreground"):
            return _int(value["process_group_id"])

    # -- the end

    def terminate(self) -> int:
        """Ends every member of the session (SIGHUP and SIGTERM, SIGKILL
        after the grace period) and returns once none is left, with the
        number of survivors (expected: 0). Idempotent."""
        r = self._remote
        r.check_here()
        st = self._state
        if st.final:
            return int(st.snapshot.get("survivors", 0))
        r.refuse_blocking()
        value = r.call("terminal_terminate", {"id": st.id})
        with _Shape("terminal_terminate"):
            return r.term_survivors(st, value)

    def terminate_async(self) -> "asyncio.Future[int]":
        """``terminate`` as an awaitable that never blocks the event loop."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[int]" = loop.create_future()
        r = self._remote
        r.check_here()
        st = self._state
        if st.final:
            future.set_result(int(st.snapshot.get("survivors", 0)))
            return future

        def answered(value: Any, error: Optional[BaseException]) -> None:
            survivors: Optional[int] = None
            if error is None:
                try:
                    with _Shape("terminal_terminate"):
                        survivors = r.term_survivors(st, value)
                except ProtocolError as e:
                    error = e
            _deliver(loop, future, survivors, error)

        try:
            r.conn.request("terminal_terminate", {"id": st.id}, answered)
        except BaseException as e:
            future.set_exception(e)
        return future

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the program exits; TimeoutError after ``timeout``
        seconds (None: no limit). Ctrl-C interrupts the wait, not the program."""
        t = _timeout_arg(timeout)
        r = self._remote
        r.check_here()
        st = self._state
        if st.snapshot["exited"]:
            return
        if t == 0:
            # No time to hear of an exit: ask.
            if r.term_now(st, live=True)["exited"]:
                return
            raise TimeoutError(f"terminal {st.pid} is still running")
        r.refuse_blocking()
        r.term_watch(st)
        if not _wait_event(st.exited, None if t is None or t > _FOREVER_S else t):
            raise TimeoutError(f"terminal {st.pid} is still running")
        if not st.snapshot["exited"] and st.failure is not None:
            raise _fresh(st.failure)

    def wait_async(self) -> "asyncio.Future[None]":
        """An asyncio future that completes (with None) when the program
        exits. Cancelling it leaves nothing behind: one wait per session is
        in flight, however many futures there are."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()
        r = self._remote
        r.check_here()
        st = self._state
        with st.lock:
            if st.snapshot["exited"]:
                future.set_result(None)
                return future
            if st.failure is not None:
                future.set_exception(_fresh(st.failure))
                return future
            st.exit_waiters.append((loop, future))

        def withdraw(f: "asyncio.Future[None]") -> None:
            if f.cancelled():
                with st.lock:
                    st.exit_waiters = [w for w in st.exit_waiters if w[1] is not f]

        future.add_done_callback(withdraw)
        try:
            r.term_watch(st)
        except BaseException as e:
            st.fail(e)
        return future

    def __repr__(self) -> str:
        # From what is known here: a repr never waits on the network.
        s = self._state.snapshot
        signal = s.get("signal")
        return (
            f"Terminal(pid={s['pid']}, exited={_py_bool(bool(s['exited']))}, "
            f"exit_code={s.get('exit_code')!r}, signal={'None' if signal is None else repr(signal)})"
        )


# Streamed runs ------------------------------------------------------------------------


class _RunStream:
    """One streamed run's chunks on their way from the reader thread to
    ``on_output``: taken by the caller's thread (``run``) or handed to its
    event loop one by one (``run_async``); in order, all before the run
    returns. While _STREAM_AHEAD_BYTES wait, the reader waits too (the
    server then holds the run back), unless the callback has taken nothing
    for _STREAM_STALL_S: then chunks are left out (their offsets show the
    gap). The first exception ``on_output`` raises stops the deliveries and
    cancels the run, which raises it once its answer came."""

    __slots__ = (
        "on_output", "cancel_run", "loop", "lock", "changed", "queued", "waiting_bytes", "taken_at",
        "ended", "stopped", "error",
    )  # fmt: skip

    def __init__(
        self,
        on_output: Callable[[OutputChunk], object],
        cancel_run: Callable[[], None],
        loop: Optional[asyncio.AbstractEventLoop],
    ) -> None:
        self.on_output = on_output
        self.cancel_run = cancel_run
        self.loop = loop
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        # For ``run``: the chunks its thread has not taken yet.
        self.queued: "collections.deque[OutputChunk]" = collections.deque()
        self.waiting_bytes = 0
        # When the callback last took a chunk, or chunks began to wait.
        self.taken_at = time.monotonic()
        # The run's answer came: no chunk follows.
        self.ended = False
        # Nothing more is handed over: the callback raised, or the caller
        # gave up on the run.
        self.stopped = False
        self.error: Optional[BaseException] = None

    def arrived(self, chunk: OutputChunk) -> None:
        """On the reader thread, as the server sends it."""
        with self.lock:
            while not self.stopped and self.waiting_bytes + len(chunk.data) > _STREAM_AHEAD_BYTES:
                stalled = time.monotonic() - self.taken_at
                if stalled >= _STREAM_STALL_S:
                    return  # left out: the callback is not taking any
                self.changed.wait(_STREAM_STALL_S - stalled)
            if self.stopped:
                return
            if self.waiting_bytes == 0:
                self.taken_at = time.monotonic()  # idle until now, not stalled
            self.waiting_bytes += len(chunk.data)
            if self.loop is None:
                self.queued.append(chunk)
                self.changed.notify_all()
                return
        try:
            self.loop.call_soon_threadsafe(self.hand, chunk)
        except RuntimeError:  # the loop is closed: nobody awaits the run
            self.stop()

    def end(self) -> None:
        """On the reader thread, once the run's answer came."""
        with self.lock:
            self.ended = True
            self.changed.notify_all()

    def stop(self) -> None:
        """Nothing more is handed over (the chunks waiting are dropped)."""
        with self.lock:
            self.stopped = True
            self.queued.clear()
            self.changed.notify_all()

    def hand(self, chunk: OutputChunk) -> None:
        """Calls ``on_output`` with one chunk, unless the stream stopped."""
        with self.lock:
            self.waiting_bytes -= len(chunk.data)
            self.taken_at = time.monotonic()
            self.changed.notify_all()
            if self.stopped:
                return
        try:
            self.on_output(chunk)
        except BaseException as e:  # Ctrl-C in the callback too: the run is cancelled, then it is raised
            self.error = e
            self.stop()
            self.cancel_run()

    def hand_over(self, timeout: float) -> bool:
        """``run``'s side: waits up to ``timeout`` for chunks and hands over
        those that came; True once the run's answer came and every chunk
        before it was handed over (or left out, once the deliveries
        stopped)."""
        with self.lock:
            if not self.queued and not self.ended:
                self.changed.wait(timeout)
            chunks = list(self.queued)
            self.queued.clear()
            ended = self.ended
        for chunk in chunks:
            self.hand(chunk)
        return ended


# Set on every listener thread: blocking there would hold every later
# delivery (the local executor refuses it the same way).
_in_listener = threading.local()


class _Remote:
    """The executor's state, apart from the public object so that the
    reader and listener threads never keep that object alive (it is closed
    when it is garbage)."""

    def __init__(self, transport: _Transport) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.states: "weakref.WeakValueDictionary[str, _ProcState]" = weakref.WeakValueDictionary()
        self.listeners: Dict[int, Callable[[Process], object]] = {}
        self.listener_ids = itertools.count(1)
        self.deliveries: Optional["queue.Queue[Optional[_ProcState]]"] = None
        self.dispatcher: Optional[threading.Thread] = None
        self.run_ids = itertools.count(1)
        # run_id → the stream of a run(..., on_output=...) on its way.
        self.run_streams: Dict[str, _RunStream] = {}
        # The runs on their way (sent, not answered), and those of them
        # whose cancel was sent: that is sent again once a dropped session
        # is resumed, since it may have been lost with the drop (the server
        # takes a second cancel of a run as the first).
        self.runs_on_their_way: Set[str] = set()
        self.cancelled_runs: Set[str] = set()
        # None: a process's output is read by the server's consuming read.
        # Where the session can be resumed (keep_session), by offset from
        # this client's own cursors instead, id → cursor.
        self.cursors: Optional[Dict[str, _ReadCursor]] = None
        self.closing = False
        self.ended = False
        self.closed = threading.Event()
        self.stash: Optional[Dict[str, _ProcState]] = None
        self.config: Dict[str, Any] = {}
        self.sandbox_mode: Optional[str] = None
        self.host: Dict[str, Any] = {}
        self.server: Dict[str, Any] = {}
        self.terminals: "weakref.WeakValueDictionary[str, _TermState]" = weakref.WeakValueDictionary()
        self.term_ids = itertools.count(1)
        self.conn = _Connection(transport, self._notified, self._lost)

    # -- calls

    def check_here(self) -> None:
        pid = os.getpid()
        if pid != self.pid:
            raise ForkedChildError(
                f"this belongs to process {self.pid}, and this is its forked child {pid}: create a new Executor here"
            )

    def check_open(self) -> None:
        """For what needs a live executor on the far side (resolve, run, start, …)."""
        self.check_here()
        if self.closing:
            raise DisposedError(_DISPOSED)
        failure = self.conn.failure
        if failure is not None:
            raise _fresh(failure)

    def refuse_blocking(self) -> None:
        if getattr(_in_listener, "active", False):
            raise BlockingCallError(_WOULD_BLOCK)

    def send(self, method: str, params: Dict[str, Any], *, oversize_field: Optional[str] = None) -> _Reply:
        reply = _Reply()
        self.conn.request(method, params, reply.settle, oversize_field=oversize_field)
        return reply

    def call(self, method: str, params: Dict[str, Any], *, oversize_field: Optional[str] = None) -> Any:
        self.check_here()
        return self.send(method, params, oversize_field=oversize_field).get()

    def keep_session(self, session: Any) -> None:
        """After initialize, where the server keeps the session when its
        connection ends (``session`` is its answer's): output is read by
        offset from now on, and a dropped connection is made again."""
        with _Shape("initialize"):
            s = _obj(session)
            token = _str(s["token"])
            linger_ms = _int(s["linger_ms"])
        self.cursors = {}
        self.conn.resume_with(_Resumable(token, linger_ms / 1000, self._resumed))

    def _resumed(self, info: Dict[str, Any]) -> None:
        """The session is back after a dropped connection (on the reader
        thread: nothing here waits). The configuration in force is the
        server's (a reconfigure whose answer was lost may have taken
        effect); each process and terminal session still running here is
        asked again, since a task_done or terminal_exit the server had to
        leave out while nobody listened (``missed``) would never come.
        Output needs nothing: it is read by offset, and reads on their way
        were asked again."""
        with _Shape("initialize"):
            self.config = _obj(info["config"])
            self.sandbox_mode = _opt_str(self.config.get("sandbox_mode"))
        with self.lock:
            states = [st for st in self.states.values() if not st.snapshot["settled"]]
            terminals = [t for t in self.terminals.values() if t.snapshot["pid"] and not t.snapshot["exited"]]
            cancelled = list(self.cancelled_runs)
        for run_id in cancelled:
            self.conn.notify("cancel", {"run_id": run_id})
        for state in states:
            self.conn.request("get", {"id": state.id}, functools.partial(self._refreshed, state))
        for term in terminals:
            self.conn.request("terminal_get", {"id": term.id}, functools.partial(self._term_refreshed, term))

    def _refreshed(self, state: _ProcState, value: Any, error: Optional[BaseException]) -> None:
        if error is not None:
            return
        with _Shape("get"):
            process = _obj(value)["process"]
            if process is None:
                return  # forgotten meanwhile: what is known of it stays
            state = self.apply(_snapshot(process))
        if state.snapshot["settled"]:
            self._announce(state)  # its task_done may be one that was left out

    def _term_refreshed(self, term: _TermState, value: Any, error: Optional[BaseException]) -> None:
        if error is None:
            with _Shape("terminal_get"):
                term.update(_term_snapshot(value["terminal"]))

    def registry(self) -> Optional[Dict[str, _ProcState]]:
        """After ``close``: what the registry held when it closed; else None
        (the server answers). Raises when nothing could be kept (the
        connection was already gone): an empty registry would be a lie."""
        self.check_here()
        if not self.ended:
            return None
        if self.stash is None:
            failure = self.conn.failure
            raise _fresh(failure) if isinstance(failure, TransportError) else DisposedError(_DISPOSED)
        return self.stash

    # -- processes

    def apply(self, snapshot: Dict[str, Any]) -> _ProcState:
        id = str(snapshot["id"])
        with self.lock:
            if self.cursors is not None and id not in self.cursors:
                # Where its consuming reads would start: 0, or for a run
                # handed over at its timeout, just after the run's result.
                output = snapshot.get("output") or {}
                self.cursors[id] = _ReadCursor(int(output.get("stdout_read", 0)), int(output.get("stderr_read", 0)))
            state = self.states.get(id)
            if state is None:
                state = _ProcState(snapshot)
                self.states[id] = state
                return state
        state.update(snapshot)
        return state

    def process(self, snapshot: Any, method: str) -> Process:
        with _Shape(method):
            snap = _snapshot(snapshot)
        return Process(self, self.apply(snap))

    def current(self, state: _ProcState) -> Dict[str, Any]:
        snap = state.snapshot
        if snap["settled"] or os.getpid() != self.pid:
            return snap
        if state.failure is not None:
            raise _fresh(state.failure)
        if self.ended:
            return snap
        found = self.call("get", {"id": state.id})
        with _Shape("get"):
            if found.get("process") is None:
                return state.snapshot  # forgotten: it had settled, and said so
            self.apply(_snapshot(found["process"]))
        return state.snapshot

    def watch(self, state: _ProcState) -> None:
        """Makes sure one ``wait`` for the process is in flight: its answer
        (or a task_done, or the close) settles every waiter."""
        with state.lock:
            if state.wait_sent or state.snapshot["settled"] or state.failure is not None:
                return
            state.wait_sent = True
        if self.ended:
            state.fail(DisposedError(_DISPOSED))
            return

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if error is None:
                try:
                    with _Shape("wait"):
                        self.apply(_snapshot(value["process"]))
                except ProtocolError as e:
                    state.fail(e)
            elif isinstance(error, NotFoundError):
                # Forgotten, so settled; its last facts are what we have.
                state.settled.set()
            else:
                state.fail(error)

        try:
            self.conn.request("wait", {"id": state.id}, answered)
        except BaseException:
            with state.lock:
                state.wait_sent = False
            raise

    def read_output_of(self, state: _ProcState) -> ProcessRead:
        if self.registry() is not None:
            return state.take_final_read()
        try:
            return self.read_output(state.id)
        except NotFoundError:
            return _NOTHING_READ  # forgotten: its output went with it

    def read_output(self, id: str) -> ProcessRead:
        """A consuming read of the process ``id`` (NotFoundError once the
        server no longer has it)."""
        self.check_here()
        return self.begin_read(id)()

    def begin_read(self, id: str) -> Callable[[], ProcessRead]:
        """Sends the read of a process's new output and returns what waits
        for its answer. The server's consuming read; or, where the session
        can be resumed, a read from this client's own offsets: two
        ``read_from``, which a reconnection asks again, the cursor moving
        only once both answers are in."""
        if self.cursors is None:
            reply = self.send("read_output", {"id": id})

            def consumed() -> ProcessRead:
                value = reply.get()
                with _Shape("read_output"):
                    return _process_read(value)

            return consumed
        cursor = self._cursor(id)

        def ask(offsets: Tuple[int, int]) -> Tuple[_Reply, _Reply]:
            return (
                self.send("read_from", {"id": id, "stream": "stdout", "from": offsets[0]}),
                self.send("read_from", {"id": id, "stream": "stderr", "from": offsets[1]}),
            )

        with cursor.lock:
            asked = (cursor.stdout, cursor.stderr)
        replies = ask(asked)

        def by_offset() -> ProcessRead:
            nonlocal asked, replies
            while True:
                try:
                    o_value, e_value = replies[0].get(), replies[1].get()
                except NotFoundError:
                    self.drop_cursor(id)
                    raise
                with _Shape("read_from"):
                    o, e = _stream_read(o_value), _stream_read(e_value)
                with cursor.lock:
                    if (cursor.stdout, cursor.stderr) == asked:
                        cursor.stdout, cursor.stderr = o.next_offset, e.next_offset
                        break
                    # Another read of this process came back first, with
                    # some of this one's text: from where it left off.
                    asked = (cursor.stdout, cursor.stderr)
                replies = ask(asked)
            return ProcessRead(
                delta=_compose_delta(o.text, e.text),
                lossy=o.lossy or e.lossy,
                stdout_spill_path=o.spill_path,
                stderr_spill_path=e.spill_path,
                stdout_spill_error=o.spill_error,
                stderr_spill_error=e.spill_error,
            )

        return by_offset

    def _cursor(self, id: str) -> _ReadCursor:
        """This client's offsets of ``id``. A process not seen yet (a run
        handed over at its timeout) is looked up first: its snapshot says
        where its reads start. NotFoundError for one the server does not
        have."""
        assert self.cursors is not None
        with self.lock:
            cursor = self.cursors.get(id)
        if cursor is None:
            found = self.call("get", {"id": id})
            with _Shape("get"):
                if found["process"] is not None:
                    self.apply(_snapshot(found["process"]))
            with self.lock:
                cursor = self.cursors.get(id)
        if cursor is None:
            raise _not_found(id)
        return cursor

    def drop_cursor(self, id: str) -> None:
        """The process is gone from the server (forgotten), and its output."""
        with self.lock:
            if self.cursors is not None:
                self.cursors.pop(id, None)

    def kill_of(self, state: _ProcState) -> bool:
        if state.snapshot["settled"] or self.registry() is not None:
            return False
        try:
            began = self.call("kill", {"id": state.id})
        except NotFoundError:
            return False
        with _Shape("kill"):
            return _bool(began["began"])

    def stdin_write(self, state: _ProcState, piece: bytes, callback: Optional[_Callback] = None) -> _Reply:
        reply = _Reply()
        done = callback or reply.settle
        if self.registry() is not None:
            raise _stdin_closed(state.id, "exited" if state.snapshot.get("has_stdin_pipe") else "not-piped")
        params = {"id": state.id, "data_base64": base64.b64encode(piece).decode("ascii")}

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if isinstance(error, NotFoundError):  # forgotten, so it has exited
                error = _stdin_closed(state.id, "exited" if state.snapshot.get("has_stdin_pipe") else "not-piped")
            done(None if error is not None else value, error)

        self.conn.request("write_stdin", params, answered)
        return reply

    def close_stdin_of(self, state: _ProcState) -> bool:
        gone = self.registry() is not None
        if not gone:
            try:
                closed = self.call("close_stdin", {"id": state.id})
                with _Shape("close_stdin"):
                    return _bool(closed["closed"])
            except NotFoundError:
                pass
        if not state.snapshot.get("has_stdin_pipe"):
            raise _stdin_closed(state.id, "not-piped")
        return False

    # -- terminal sessions

    def spawn_terminal(self, request: Dict[str, Any]) -> Terminal:
        # The id is chosen here, so that a terminal_exit that overtakes the
        # spawn's answer (the program may exit at once) finds its session.
        tid = f"term-{next(self.term_ids)}"
        state = _TermState(tid)
        with self.lock:
            self.terminals[tid] = state
        field = "request.argv" if "argv" in request else "request.command"
        try:
            try:
                answer = self.call("terminal_spawn", {"request": request, "id": tid}, oversize_field=field)
            except AnswerLost as lost:
                answer = self._spawned_anyway(tid, lost)
            with _Shape("terminal_spawn"):
                state.update(_term_snapshot(answer["terminal"]))
        except InvalidArgumentError as e:
            self._forget_terminal(tid)
            raise _request_field(e) from None
        except (KeyboardInterrupt, SystemExit):
            # Interrupted while it started: nobody will have its handle, so
            # it is ended rather than left running until the close.
            self._forget_terminal(tid)
            self.conn.notify("terminal_terminate", {"id": tid})
            raise
        except BaseException:
            self._forget_terminal(tid)
            raise
        return Terminal(self, state)

    def _spawned_anyway(self, tid: str, lost: AnswerLost) -> Any:
        """A terminal_spawn whose answer a dropped connection lost: the
        session may have been made, and is looked up by the id chosen here
        (``lost`` is raised when it was not)."""
        try:
            return self.call("terminal_get", {"id": tid})
        except TerminalClosedError:
            raise lost from None

    def _forget_terminal(self, tid: str) -> None:
        with self.lock:
            self.terminals.pop(tid, None)

    def term_now(self, st: _TermState, *, live: bool) -> Dict[str, Any]:
        """The session's facts: what is known when it is final (or, unless
        ``live``, once the program exited: exit facts never change), else
        the server's answer now."""
        snap = st.snapshot
        if st.final or os.getpid() != self.pid:
            return snap
        if not live and snap["exited"]:
            return snap
        if st.failure is not None:
            raise _fresh(st.failure)
        if self.ended:
            return snap
        value = self.call("terminal_get", {"id": st.id})
        with _Shape("terminal_get"):
            st.update(_term_snapshot(value["terminal"]))
        return st.snapshot

    def term_output_ended(self, st: _TermState) -> bool:
        with st.lock:
            if st.unread:
                return False
            if st.over:
                return True
        snap = self.term_now(st, live=True)
        if not snap.get("output_ended"):
            return False
        # The server has nothing left: everything went to reads of ours. A
        # long-poll's answer may come after this one, so the reads sent
        # before it must be in before the end can be told.
        with st.lock:
            st.wait_reads(st.reads_sent)
            if st.unread:
                return False
            if not st.reading:
                st.ended = True
            return True

    def start_term_read(self, st: _TermState, wait_ms: Optional[float]) -> None:
        """Sends the one ``terminal_read`` in flight (the caller marked it
        with ``begin_read``): at once, or a long-poll of ``wait_ms``."""
        params: Dict[str, Any] = {"id": st.id}
        if wait_ms is not None:
            params["wait_ms"] = wait_ms
        try:
            self.conn.request("terminal_read", params, lambda v, e: self._term_read_answered(st, v, e))
        except BaseException as e:
            self._term_read_answered(st, None, e)

    def _term_read_answered(self, st: _TermState, value: Any, error: Optional[BaseException]) -> None:
        again = False
        failed: Optional[BaseException] = None
        with st.lock:
            st.reading = False
            st.reads_done += 1
            text, ended = "", False
            if error is None:
                try:
                    with _Shape("terminal_read"):
                        text, ended = _str(value["text"]), _bool(value["ended"])
                except ProtocolError as e:
                    error = e
            if error is None:
                if text:
                    st.unread.append(text)
                if ended:
                    st.ended = True
            elif isinstance(error, TerminalClosedError):
                st.ended = True  # the server no longer has it: nothing more will come
            elif isinstance(error, AnswerLost):
                st.lost = error  # the text it brought is gone; the session is not
            else:
                failed = error
            handouts = st.serve()
            if failed is None and st.output_waiters and not st.over and st.failure is None:
                # Async readers still wait: the next long-poll, at once.
                st.begin_read()
                again = True
            st.changed.notify_all()
        st.hand(handouts)
        if failed is not None:
            st.fail(failed)  # every reader and waiter hears of it
        if again:
            self.start_term_read(st, _FOREVER_MS)

    def term_read_now(self, st: _TermState) -> str:
        """``read_output``: one read at once, unless one is on its way
        (then what has arrived is what there is)."""
        with st.lock:
            mine = None if (st.reading or st.over or st.failure is not None) else st.begin_read()
        if mine is not None:
            self.start_term_read(st, None)
            with st.lock:
                st.wait_reads(mine)
        return st.taken_or_failure()

    def term_await_output(self, st: _TermState, deadline: Optional[float], *, keep: bool) -> None:
        """Until there is unread output (``keep``: until the output ended,
        taking every piece into ``unread``), the output ended, the
        connection failed, or ``deadline`` passed. Long-polls for the time
        left; a poll already on its way is waited for instead."""
        while True:
            with st.lock:
                if ((st.unread or st.lost is not None) and not keep) or st.over or st.failure is not None:
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                if st.reading:
                    st.changed.wait(_SIGNAL_POLL if left is None else min(left, _SIGNAL_POLL))
                    continue
                st.begin_read()
            self.start_term_read(st, _FOREVER_MS if left is None else left * 1000)

    def term_next(self, st: _TermState) -> "asyncio.Future[str]":
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[str]" = loop.create_future()
        with st.lock:
            if st.unread:
                future.set_result(st.take())
                return future
            if st.over:
                future.set_exception(StopAsyncIteration())
                return future
            if st.lost is not None:
                future.set_exception(st.lost)
                st.lost = None
                return future
            if st.failure is not None:
                future.set_exception(_fresh(st.failure))
                return future
            st.output_waiters.append((loop, future))
            start = not st.reading
            if start:
                st.begin_read()

        def withdraw(f: "asyncio.Future[str]") -> None:
            # Cancelled: its place goes; a poll on its way still brings its
            # text, to the next reader.
            if f.cancelled():
                with st.lock:
                    st.output_waiters = [w for w in st.output_waiters if w[1] is not f]

        future.add_done_callback(withdraw)
        if start:
            self.start_term_read(st, _FOREVER_MS)
        return future

    def term_write(self, st: _TermState, pieces: List[Dict[str, str]], callback: Optional[_Callback] = None) -> List[_Reply]:
        """Sends one write's pieces back to back (the server writes them in
        call order); each is answered once the terminal took it."""
        replies: List[_Reply] = []
        with st.write_lock:
            for piece in pieces:
                reply = _Reply()
                replies.append(reply)
                self.conn.request("terminal_write", {"id": st.id, **piece}, callback or reply.settle)
        return replies

    def term_survivors(self, st: _TermState, value: Any) -> int:
        survivors = _int(_obj(value)["survivors"])
        with st.lock:
            st.snapshot = {**st.snapshot, "survivors": survivors}
        return survivors

    def term_watch(self, st: _TermState) -> None:
        """Makes sure one ``terminal_wait`` is in flight: its answer (or a
        terminal_exit, or the close) wakes every waiter."""
        with st.lock:
            if st.watch_sent or st.snapshot["exited"] or st.failure is not None or st.final:
                return
            st.watch_sent = True

        def answered(value: Any, error: Optional[BaseException]) -> None:
            if error is None:
                try:
                    with _Shape("terminal_wait"):
                        st.update(_term_snapshot(value["terminal"]))
                except ProtocolError as e:
                    st.fail(e)
            else:
                st.fail(error)

        try:
            self.conn.request("terminal_wait", {"id": st.id}, answered)
        except BaseException:
            with st.lock:
                st.watch_sent = False
            raise

    def _keep_terminals(self) -> None:
        """At the close, after dispose ended every session: the final facts
        and the last output of each session a handle is left for, so that
        the handles answer afterwards as local ones do. Bounded."""
        with self.lock:
            states = [st for st in self.terminals.values() if st.snapshot["pid"]]
        gets = [(st, self.send("terminal_get", {"id": st.id})) for st in states]
        deadline = time.monotonic() + _KEEP_OUTPUT_S
        for st in states:
            self.term_await_output(st, deadline, keep=True)
        for st, reply in gets:
            try:
                with _Shape("terminal_get"):
                    st.update(_term_snapshot(reply.get()["terminal"]))
            except DshError:
                continue
            with st.lock:
                st.wait_reads(st.reads_sent)
                st.final = True
                handouts = st.serve()
                st.changed.notify_all()
            st.hand(handouts)

    # -- the reader's news

    def _notified(self, method: str, params: Dict[str, Any]) -> None:
        if method == "terminal_exit":
            snapshot = _term_snapshot(params["terminal"])
            with self.lock:
                st = self.terminals.get(str(snapshot["id"]))
            if st is not None:
                st.update(snapshot)
            return
        if method == "run_output":
            with self.lock:
                stream = self.run_streams.get(params["run_id"])
            if stream is not None:
                name = _str(params["stream"])
                if name not in ("stdout", "stderr"):
                    raise ValueError(f"run_output of a stream named {name!r}")
                data = base64.b64decode(_str(params["data_base64"]), validate=True)
                stream.arrived(OutputChunk("stdout" if name == "stdout" else "stderr", _int(params["offset"]), data))
            return
        if method != "task_done":
            return  # a notification this client did not ask for: not ours to judge
        self._announce(self.apply(_snapshot(params["process"])))

    def _announce(self, state: _ProcState) -> None:
        """Hands a settled process to the task-done listeners, once."""
        if not state.announce():
            return
        with self.lock:
            deliveries = self.deliveries if self.listeners else None
        if deliveries is not None:
            deliveries.put(state)

    # -- streamed runs

    def open_stream(
        self,
        params: Dict[str, Any],
        run_id: str,
        on_output: Optional[Callable[[OutputChunk], object]],
        loop: Optional[asyncio.AbstractEventLoop],
    ) -> Optional[_RunStream]:
        """For ``run(..., on_output=...)``: asks the server to stream the
        run's output and routes its run_output notifications to a new
        stream until ``close_stream``. None without ``on_output``."""
        if on_output is None:
            return None
        if not callable(on_output):
            raise TypeError(f"on_output must be callable, got {_type_name(on_output)}")
        stream = _RunStream(on_output, lambda: self.cancel_run(run_id), loop)
        params["stream"] = True
        with self.lock:
            self.run_streams[run_id] = stream
        return stream

    def send_run(
        self,
        params: Dict[str, Any],
        run_id: str,
        stream: Optional[_RunStream],
        answered: Callable[[Any, Optional[BaseException]], None],
    ) -> None:
        """Sends a run; ``answered`` gets its answer. The run is on its way
        (a cancel may be owed to it) until then; one that could not be sent
        never is, and its stream is closed."""

        def on_answer(value: Any, error: Optional[BaseException]) -> None:
            self.run_answered(run_id)
            answered(value, error)

        with self.lock:
            self.runs_on_their_way.add(run_id)
        try:
            self.conn.request("run", params, on_answer, oversize_field="spec.stdin")
        except BaseException:
            self.run_answered(run_id)
            if stream is not None:
                self.close_stream(run_id, stream)
            raise

    def cancel_run(self, run_id: str) -> None:
        """Asks the server to cancel a run on its way; once it was answered
        there is nothing to cancel (a process it was handed over to is
        killed instead: :meth:`kill_handed_over`)."""
        with self.lock:
            if run_id not in self.runs_on_their_way:
                return
            self.cancelled_runs.add(run_id)
        self.conn.notify("cancel", {"run_id": run_id})

    def kill_handed_over(self, result: Optional[RunResult]) -> None:
        """A run whose ``on_output`` raised is not returned: a process it
        was handed over to at its timeout (the cancel came after the hand-
        over) would run on unseen, so it is killed. Sends without waiting
        (from the event loop too); its answer changes nothing."""
        if result is None or result.background_id is None:
            return
        try:
            self.conn.request("kill", {"id": result.background_id}, lambda value, error: None)
        except DshError:
            pass  # the connection is gone: so is the process, with the session

    def run_answered(self, run_id: str) -> None:
        """The run's answer came (or it was never sent): no cancel is owed.
        (:meth:`send_run` calls it.)"""
        with self.lock:
            self.runs_on_their_way.discard(run_id)
            self.cancelled_runs.discard(run_id)

    def close_stream(self, run_id: str, stream: _RunStream) -> None:
        """The run's answer came (or it was never sent): nothing follows.
        The chunks before it are still handed over."""
        with self.lock:
            self.run_streams.pop(run_id, None)
        stream.end()

    def _lost(self, failure: BaseException) -> None:
        with self.lock:
            states = list(self.states.values())
            terminals = list(self.terminals.values())
        for state in states:
            state.fail(failure)
        for terminal in terminals:
            terminal.fail(failure)

    # -- listeners

    def subscribe(self, callback: Callable[[Process], object]) -> int:
        with self.lock:
            id = next(self.listener_ids)
            if self.closing:
                return id
            if self.dispatcher is None:
                self.deliveries = queue.Queue()
                self.dispatcher = threading.Thread(
                    target=self._deliver_all, args=(self.deliveries,), name="dsh-remote-listeners", daemon=True
                )
                self.dispatcher.start()
            self.listeners[id] = callback
        return id

    def _deliver_all(self, deliveries: "queue.Queue[Optional[_ProcState]]") -> None:
        _in_listener.active = True
        while True:
            state = deliveries.get()
            if state is None:
                return
            with self.lock:
                listeners = list(self.listeners.values())
            for listener in listeners:
                try:
                    listener(Process(self, state))
                except BaseException as e:
                    _report_unraisable(e, listener)

    # -- the end

    def close(self) -> None:
        if os.getpid() != self.pid:
            # A forked child's copy: the connection is the parent's.
            self.closing = self.ended = True
            self.closed.set()
            return
        self.refuse_blocking()
        with self.lock:
            first = not self.closing
            self.closing = True
        if not first:
            _wait_event(self.closed, None)
            return
        try:
            try:
                try:
                    self.send("dispose", {}).get()
                except AnswerLost:
                    # The connection dropped and came back meanwhile; a
                    # second dispose is harmless, and the first may never
                    # have reached the server.
                    self.send("dispose", {}).get()
                self._keep_registry()
                self._keep_terminals()
            except (TransportError, DisposedError):
                pass  # the far side disposes by itself when the connection ends
            with self.lock:
                deliveries, dispatcher = self.deliveries, self.dispatcher
            if deliveries is not None and dispatcher is not None:
                deliveries.put(None)  # after every delivery already queued
                dispatcher.join()
        finally:
            with self.lock:
                self.listeners.clear()
            self.conn.shutdown()
            self.ended = True
            with self.lock:
                states = list(self.states.values())
                terminals = list(self.terminals.values())
            for state in states:
                state.fail(DisposedError(_DISPOSED))
            for terminal in terminals:
                terminal.fail(DisposedError(_DISPOSED))
            self.closed.set()

    def _keep_registry(self) -> None:
        """Fetches every process's final facts and unread output before the
        connection ends, so that handles and by-id calls keep answering
        after ``close`` as they do locally. The reads are sent together:
        one round trip, not one per process."""
        listed = self.send("list", {}).get()
        with _Shape("list"):
            snapshots = [_snapshot(p) for p in listed["processes"]]
        states = [self.apply(snap) for snap in snapshots]
        reads = [(state, self.begin_read(state.id)) for state in states]
        stash: Dict[str, _ProcState] = {}
        for state, read in reads:
            try:
                state.final_read = read()
            except NotFoundError:
                pass
            stash[state.id] = state
        self.stash = stash


# The executor -----------------------------------------------------------------------

# Executors still open at interpreter exit are closed, so no command they
# started outlives the program (as the local ones).
_open_executors: "weakref.WeakSet[Executor]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for executor in list(_open_executors):
        try:
            executor.close()
        except DshError:
            pass


def _transport(command: Optional[Sequence[str]], socket: Optional[_Path]) -> _Transport:
    if (command is None) == (socket is None):
        raise TypeError(
            "Executor() takes exactly one of command= (a transport command, such as "
            "['ssh', 'host', 'dsh', 'serve', '--stdio']) and socket= (the path of a "
            "`dsh serve --listen unix:PATH` socket)"
        )
    if command is not None:
        if isinstance(command, (str, bytes)) or not isinstance(command, Sequence):
            raise TypeError(f"command must be a list of str (the transport's argv), got {_type_name(command)}")
        argv: List[str] = []
        for i, arg in enumerate(command):
            if isinstance(arg, os.PathLike):
                arg = os.fspath(arg)
            if not isinstance(arg, str):
                raise TypeError(f"command must be a list of str, item {i} is {_type_name(arg)}")
            argv.append(arg)
        if not argv:
            raise ValueError("command is empty: it must name the transport program")
        return _CommandTransport(argv)
    path = os.fspath(socket) if isinstance(socket, os.PathLike) else socket
    if not isinstance(path, str):
        raise TypeError(f"socket must be a str or os.PathLike, got {_type_name(socket)}")
    return _SocketTransport(path)


class Executor:
    """A bash executor on the far side of a transport, with the API of
    ``dsh_native.Executor`` (docs/protocol.md).

    Exactly one of:

    - ``command``: a program that speaks the protocol on its stdin and
      stdout, started here: ``["ssh", "build-1", "dsh", "serve", "--stdio"]``,
      ``["kubectl", "exec", "-i", "pod", "--", "dsh", "serve", "--stdio"]``.
    - ``socket``: the path of a ``dsh serve --listen unix:PATH`` socket.

    The other keywords configure the far executor exactly as the local
    constructor's do (docs/configuration.md); ``cwd`` and ``spill_dir`` are
    paths over there. A bad value raises InvalidArgumentError naming it; a
    transport that cannot be started or that ends raises TransportError.
    Use it as a context manager: leaving the block calls :meth:`close`.
    Executors still open at interpreter exit are closed then.

    ``reconnect`` (default True) matters where the server keeps a session
    after its connection ends (``dsh serve --stdio --linger SECONDS``, or
    ``dsh serve --listen unix:PATH --linger SECONDS``). When the transport
    then ends without ``close()``, the client starts it again (the same
    command, or the socket), retrying after 100 ms, doubling up to 2 s,
    for as long as the server keeps the session, and resumes it. Calls
    made meanwhile wait and are sent after the resume (``close()`` too,
    which disposes the session then). A call that was on its way keeps
    waiting for its answer when the server still owes it; one that only
    reads (``get``, ``list``, ``wait``, a read of output, …) is asked
    again; any other fails with :class:`AnswerLost`, since it may or may
    not have taken effect (a terminal session, whose id is chosen here, is
    looked up instead; ``close()`` disposes again). Each process's output
    is read by this client's
    own offsets (``read_from``), so ``read_output`` returns every byte
    once across a drop. When the session cannot be resumed in its linger
    time (the server went away, or refused the session), everything fails
    with TransportError as it does without a lingering server. With
    ``reconnect=False``, or a server that keeps no sessions, a dropped
    transport ends the executor at once.
    """

    __slots__ = ("_remote", "_finalizer", "__weakref__")

    def __init__(
        self,
        command: Optional[Sequence[str]] = None,
        *,
        socket: Optional[_Path] = None,
        cwd: Optional[_Path] = None,
        timeout_ms: Optional[_Number] = None,
        max_timeout_ms: Optional[_Number] = None,
        max_output_bytes: Optional[_Number] = None,
        max_spill_bytes: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        spill_dir: Optional[_Path] = None,
        retain_settled: Optional[_Number] = None,
        sandbox_mode: Optional["_SandboxModeName"] = None,
        limits: Optional["_Limits"] = None,
        reconnect: bool = True,
    ) -> None:
        # Bad input is refused before anything is started.
        config = _config_params(
            cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes,
            grace_ms, spill_dir, retain_settled, sandbox_mode, limits,
        )  # fmt: skip
        if not isinstance(reconnect, bool):
            raise TypeError(f"reconnect must be a bool, got {_type_name(reconnect)}")
        remote = _Remote(_transport(command, socket))
        try:
            info = remote.call(
                "initialize", {"protocol_version": PROTOCOL_VERSION, "config": config, "client": _CLIENT}
            )
            with _Shape("initialize"):
                if info["protocol_version"] != PROTOCOL_VERSION:
                    raise ValueError(f"it speaks protocol version {info['protocol_version']!r}")
                remote.config = _obj(info["config"])
                remote.sandbox_mode = _opt_str(info.get("sandbox_mode"))
                remote.host = _obj(info.get("host") or {})
                remote.server = _obj(info.get("server") or {})
            if reconnect and info.get("session") is not None:
                remote.keep_session(info["session"])
        except InvalidArgumentError as e:
            remote.closing = True
            remote.conn.shutdown()
            if e.field == "protocol_version":
                raise ProtocolError(f"the server does not speak protocol version {PROTOCOL_VERSION}: {e}") from None
            raise
        except BaseException:
            remote.closing = True
            remote.conn.shutdown()
            raise
        self._remote = remote
        # Garbage: end the connection (the far side disposes); no waiting,
        # since a finalizer may run on any thread.
        self._finalizer = weakref.finalize(self, remote.conn.abandon)
        self._finalizer.atexit = False
        _open_executors.add(self)

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- facts

    @property
    def sandbox_mode(self) -> Optional["_SandboxModeName"]:
        """The default sandbox mode of the far executor, or None."""
        mode = self._remote.sandbox_mode
        if mode in ("read-only", "workspace-write", "danger-full-access"):
            return mode  # type: ignore[return-value]
        return None

    @property
    def disposed(self) -> bool:
        """True once ``close()`` has begun, or the connection is gone (the
        far side disposed the executor then)."""
        return self._remote.closing or self._remote.conn.failure is not None

    @property
    def server_version(self) -> Optional[str]:
        """The version of ``dsh`` serving this connection."""
        v = self._remote.server.get("version")
        return v if isinstance(v, str) else None

    @property
    def host_cwd(self) -> Optional[str]:
        """The server's working directory: the default workdir when no
        ``cwd`` is configured."""
        v = self._remote.host.get("cwd")
        return v if isinstance(v, str) else None

    def limits_support(self) -> Dict[str, str]:
        """``dsh_native.limits_support()`` of the far host."""
        facts = self._remote.host.get("facts") or {}
        return {str(k): str(v) for k, v in (facts.get("limits_support") or {}).items()}

    def metadata_unavailable(self) -> Optional[str]:
        """``dsh_native.metadata_unavailable()`` of the far host."""
        v = (self._remote.host.get("facts") or {}).get("metadata_unavailable")
        return v if isinstance(v, str) else None

    # -- configuration

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
        sandbox_mode: Optional["_SandboxModeName"] = None,
        limits: Optional["_Limits"] = None,
    ) -> None:
        """Replaces the configuration for everything resolved or started
        from now on, as the local ``reconfigure`` does."""
        config = _config_params(
            cwd, timeout_ms, max_timeout_ms, max_output_bytes, max_spill_bytes,
            grace_ms, spill_dir, retain_settled, sandbox_mode, limits,
        )  # fmt: skip
        r = self._remote
        r.check_open()
        answer = r.call("reconfigure", {"config": config})
        with _Shape("reconfigure"):
            r.config = _obj(answer["config"])
            r.sandbox_mode = _opt_str(r.config.get("sandbox_mode"))

    # -- commands

    def resolve(
        self,
        command: str,
        *,
        workdir: Optional[_FsPath] = None,
        timeout_ms: Optional[_Number] = None,
        stdout_max_bytes: Optional[_Number] = None,
        stdin: Union[str, bytes, int, None] = None,
        env: Optional[Mapping[str, str]] = None,
        dsh_env: Optional[Mapping[str, str]] = None,
        owner: Optional[str] = None,
        sandbox_policy: Union[SandboxPolicy, _NativeSandboxPolicy, Mapping[str, Optional[_FsPath]], None] = None,
        on_expiry: Optional[Literal["kill", "background"]] = None,
        limits: Optional["_Limits"] = None,
    ) -> Spec:
        """Request → spec, by the far executor (its defaults, its cwd);
        the keywords are the local ``resolve``'s. Raises
        InvalidArgumentError naming the field."""
        request: Dict[str, Any] = {"command": _required_str(command, "request.command", "")}
        pipe = _is_pipe(stdin)
        if pipe:
            request["stdin_pipe"] = True
        elif stdin is not None:
            if isinstance(stdin, str):
                request["stdin"] = _required_str(stdin, "request.stdin", "")
            elif isinstance(stdin, bytes):
                request["stdin_base64"] = base64.b64encode(stdin).decode("ascii")
            else:
                raise _invalid("request.stdin", "must be str, bytes or PIPE")
        optional: Dict[str, Any] = {
            "workdir": _path(workdir, "request.workdir", ""),
            "timeout_ms": _number(timeout_ms, "request.timeout_ms"),
            "stdout_max_bytes": _number(stdout_max_bytes, "request.stdout_max_bytes"),
        }
        if on_expiry is not None:
            name = _utf8(on_expiry, "request.on_expiry", "")
            if name is None:
                raise _invalid("request.on_expiry", "must be 'kill' or 'background'")
            optional["on_expiry"] = name
        optional["env"] = _string_map(env, "request.env")
        optional["dsh_env"] = _string_map(dsh_env, "request.dsh_env")
        optional["owner"] = _optional_str(owner, "request.owner")
        optional["sandbox_policy"] = _policy(sandbox_policy)
        optional["limits"] = _limits(limits, "request")
        request.update({k: v for k, v in optional.items() if v is not None})
        r = self._remote
        r.check_open()
        answer = r.call("resolve", {"request": request}, oversize_field="request.stdin")
        with _Shape("resolve"):
            return Spec(_obj(answer["spec"]))

    def _run_params(self, spec: Spec, cancel: Optional[CancelToken]) -> Tuple[Dict[str, Any], str]:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a Spec made by a remote Executor's resolve(), got {_type_name(spec)}")
        r = self._remote
        r.check_open()
        if cancel is not None and cancel.cancelled:
            raise AlreadyCancelledError(_ALREADY_CANCELLED)
        run_id = f"run-{next(r.run_ids)}"
        return {"spec": spec._wire, "run_id": run_id}, run_id

    def run(
        self,
        spec: Spec,
        cancel: Optional[CancelToken] = None,
        *,
        on_output: Optional[Callable[[OutputChunk], object]] = None,
    ) -> RunResult:
        """Runs ``spec`` in the foreground on the far side and returns its
        RunResult. ``cancel``: a CancelToken whose ``cancel()`` aborts it.
        Ctrl-C aborts the command, waits until it is gone, and re-raises.

        ``on_output``: called on this thread with each :class:`OutputChunk`
        of the output as it arrives, in order, every one before ``run``
        returns (the result holds the output as always). A callback slower
        than the command holds it back, as a slow terminal does: once 8 MiB
        wait for it, the connection is read no further until it catches up
        (other calls' answers wait too), and the server stops reading the
        command's output. One that takes nothing for 2 s meanwhile (it
        waits for something itself) is not waited for: chunks are left
        out, as they are while the connection is down; a chunk whose
        ``offset`` is past the end of the one before shows the gap. An
        exception it raises cancels the run, no chunk is handed over after
        it, and ``run`` raises it once the run's answer came (a process the
        run was handed over to at its timeout meanwhile is killed)."""
        r = self._remote
        r.refuse_blocking()
        params, run_id = self._run_params(spec, cancel)
        stream = r.open_stream(params, run_id, on_output, None)
        reply = _Reply()

        def answered(value: Any, error: Optional[BaseException]) -> None:
            reply.settle(value, error)
            if stream is not None:
                r.close_stream(run_id, stream)

        def cancel_run() -> None:
            r.cancel_run(run_id)

        r.send_run(params, run_id, stream, answered)
        try:
            self._await_run(reply, stream, cancel, cancel_run)
        except (KeyboardInterrupt, SystemExit):
            if stream is not None:
                stream.stop()  # nobody takes chunks any more: the reader must not wait for it
            cancel_run()
            try:
                reply.wait(None)
            except BaseException:
                pass
            raise
        if stream is not None and stream.error is not None:
            try:
                with _Shape("run"):
                    handed_over: Optional[RunResult] = _run_result(reply.get())
            except BaseException:
                handed_over = None
            r.kill_handed_over(handed_over)
            raise stream.error
        value = reply.get()
        with _Shape("run"):
            return _run_result(value)

    @staticmethod
    def _await_run(
        reply: _Reply, stream: Optional[_RunStream], cancel: Optional[CancelToken], cancel_run: Callable[[], None]
    ) -> None:
        """Until the run's answer came and, streamed, every chunk before it
        was handed over; a CancelToken's ``cancel()`` is passed on."""
        poll = _CANCEL_POLL if cancel is not None else _SIGNAL_POLL
        while True:
            if stream is not None:
                if stream.hand_over(poll):
                    return
            elif reply.wait(None if cancel is None else poll):
                return
            if cancel is not None and cancel.cancelled:
                cancel_run()
                cancel = None

    async def run_async(
        self,
        spec: Spec,
        cancel: Optional[CancelToken] = None,
        *,
        on_output: Optional[Callable[[OutputChunk], object]] = None,
    ) -> RunResult:
        """Runs ``spec`` without blocking the event loop. Cancelling the
        awaiting task aborts the command (as ``cancel`` does), waits until
        it is gone, and re-raises ``asyncio.CancelledError``.

        ``on_output``: as for :meth:`run`, called on the event loop's
        thread; an exception it raises cancels the run and is raised here
        once the run's answer came."""
        r = self._remote
        params, run_id = self._run_params(spec, cancel)
        loop = asyncio.get_running_loop()
        done: "asyncio.Future[RunResult]" = loop.create_future()
        stream = r.open_stream(params, run_id, on_output, loop)

        def answered(value: Any, error: Optional[BaseException]) -> None:
            result: Optional[RunResult] = None
            if error is None:
                try:
                    with _Shape("run"):
                        result = _run_result(value)
                except ProtocolError as e:
                    error = e
            if stream is None:
                _deliver(loop, done, result, error)
                return
            r.close_stream(run_id, stream)
            streamed = stream

            def settle() -> None:
                # On the loop, after every chunk handed to it before: the
                # callback's exception, if it raised one, is the outcome.
                if streamed.error is not None:
                    r.kill_handed_over(result)
                resolve_future(done, result, streamed.error if streamed.error is not None else error)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed: nobody is waiting
                pass

        r.send_run(params, run_id, stream, answered)
        watcher: Optional["asyncio.Task[None]"] = None
        if cancel is not None:
            watcher = loop.create_task(self._watch_token(cancel, run_id, done))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if stream is not None:
                stream.stop()
            r.cancel_run(run_id)
            try:
                await done
            except BaseException:
                pass
            raise
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _watch_token(self, cancel: CancelToken, run_id: str, done: "asyncio.Future[RunResult]") -> None:
        # A CancelToken has no callback: it is looked at until the run ends.
        while not done.done():
            if cancel.cancelled:
                self._remote.cancel_run(run_id)
                return
            await asyncio.sleep(_CANCEL_POLL)

    def start(self, spec: Spec) -> Process:
        """Starts ``spec`` in the background on the far side; returns its
        Process at once."""
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a Spec made by a remote Executor's resolve(), got {_type_name(spec)}")
        r = self._remote
        r.check_open()
        answer = r.call("start", {"spec": spec._wire}, oversize_field="spec.stdin")
        return r.process(answer.get("process") if isinstance(answer, dict) else None, "start")

    # -- terminal sessions

    def spawn_terminal(
        self,
        argv: Optional[Sequence[str]] = None,
        *,
        command: Optional[str] = None,
        cwd: Optional[_FsPath] = None,
        env: Optional[Mapping[str, str]] = None,
        dsh_env: Optional[Mapping[str, str]] = None,
        rows: Optional[_Number] = None,
        cols: Optional[_Number] = None,
        grace_ms: Optional[_Number] = None,
        sandbox_policy: Union[SandboxPolicy, _NativeSandboxPolicy, Mapping[str, Optional[_FsPath]], None] = None,
    ) -> Terminal:
        """Starts a terminal session on the far side (docs/terminals.md):
        ``argv`` (a program and its arguments, looked up on the far PATH)
        or ``command`` (a line for bash), exactly one; the keywords are the
        local ``spawn_terminal``'s, ``cwd`` a path over there. Returns once
        the program has started. Raises InvalidArgumentError naming the
        field (``request.rows``), SpawnError when it cannot start."""
        if argv is not None and command is not None:
            raise _invalid("request.argv", "and command cannot both be given")
        request: Dict[str, Any] = {}
        if argv is not None:
            request["argv"] = _argv_list(argv, "request.argv")
        elif command is not None:
            request["command"] = _required_str(command, "request.command", "")
        else:
            raise _invalid("request.argv", "is required (or command, a line for bash)")
        optional: Dict[str, Any] = {
            "cwd": _path(cwd, "request.cwd", ""),
            "env": _string_map(env, "request.env"),
            "dsh_env": _string_map(dsh_env, "request.dsh_env"),
            "rows": _number(rows, "request.rows"),
            "cols": _number(cols, "request.cols"),
            "grace_ms": _number(grace_ms, "request.grace_ms"),
            "sandbox_policy": _policy(sandbox_policy),
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        r = self._remote
        r.check_open()
        r.refuse_blocking()
        return r.spawn_terminal(request)

    # -- the registry

    def get(self, id: str) -> Optional[Process]:
        """The process registered as ``id``, or None."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            state = kept.get(id)
            return None if state is None else Process(r, state)
        answer = r.call("get", {"id": id})
        process = answer.get("process") if isinstance(answer, dict) else None
        return None if process is None else r.process(process, "get")

    def owner_of(self, id: str) -> Optional[str]:
        """The ``owner`` stored at start; NotFoundError for an unknown id."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return Process(r, self._kept(kept, id)).owner
        answer = r.call("owner_of", {"id": id})
        with _Shape("owner_of"):
            return _opt_str(answer["owner"])

    def list(self) -> List[Process]:
        """Every registered background process, in start order."""
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return [Process(r, state) for state in kept.values()]
        answer = r.call("list", {})
        with _Shape("list"):
            processes = answer["processes"]
            if not isinstance(processes, list):
                raise TypeError("processes is not a list")
        return [r.process(p, "list") for p in processes]

    def read_output(self, id: str) -> ProcessRead:
        """``Process.read_output`` of the process registered as ``id``."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            return self._kept(kept, id).take_final_read()
        return r.read_output(id)

    def kill(self, id: str) -> bool:
        """``Process.kill`` of the process registered as ``id``."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            self._kept(kept, id)
            return False
        answer = r.call("kill", {"id": id})
        with _Shape("kill"):
            return _bool(answer["began"])

    def forget(self, id: str) -> None:
        """Forgets a settled process (and its output and spill files);
        StillRunningError while it runs, NotFoundError for an unknown id."""
        id = _id_arg(id)
        r = self._remote
        kept = r.registry()
        if kept is not None:
            self._kept(kept, id)
            del kept[id]
            return
        r.call("forget", {"id": id})
        r.drop_cursor(id)

    @staticmethod
    def _kept(kept: Dict[str, _ProcState], id: str) -> _ProcState:
        state = kept.get(id)
        if state is None:
            raise _not_found(id)
        return state

    def on_task_done(self, callback: Callable[[Process], object]) -> Unsubscribe:
        """Calls ``callback(process)`` once for each background process that
        settles from now on, from a listener thread of this executor; an
        exception it raises goes to ``sys.unraisablehook``. Returns a
        callable that unsubscribes."""
        if not callable(callback):
            raise TypeError(f"on_task_done: callback must be callable, got {_type_name(callback)}")
        r = self._remote
        return Unsubscribe(r, r.subscribe(callback))

    # -- the end

    def close(self) -> None:
        """Disposes the far executor (kills everything it runs and waits),
        delivers the task-done notifications already received, then ends
        the transport. Idempotent. Afterwards ``get``, ``list``,
        ``read_output`` and the process handles answer from what the
        registry held at the close; ``resolve``, ``run`` and ``start`` raise
        DisposedError. A connection already gone is not an error here."""
        self._remote.close()
        self._finalizer.detach()

    def __repr__(self) -> str:
        c = self._remote.config
        return (
            f"Executor(transport={self._remote.conn.transport.description!r}, timeout_ms={c.get('timeout_ms')}, "
            f"max_timeout_ms={c.get('max_timeout_ms')}, max_output_bytes={c.get('max_output_bytes')}, "
            f"grace_ms={c.get('grace_ms')}, disposed={_py_bool(self.disposed)})"
        )
