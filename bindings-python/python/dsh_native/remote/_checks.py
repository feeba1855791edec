"""The remote executor's parameters, checked here by the local face's rules
(the same errors, with the same messages, before anything is sent), the
errors of the connection itself, and the protocol's constants."""

from __future__ import annotations

import base64
import copy
import decimal
import errno as _errno
import json
import math
import operator
import os
import subprocess
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from .._errors import (
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
from .._native import SandboxPolicy as _NativeSandboxPolicy, __version__


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
    for key in v:
        # A misspelt key (`netwrok`) must not leave the default in place
        # unnoticed: refused, naming it, as the local face does.
        if key not in ("mode", "workspace_root", "session_id", "network"):
            name = key if isinstance(key, str) else str(key)
            raise _invalid(
                field,
                f"has an unknown key {json.dumps(name, ensure_ascii=False)} "
                "(expected mode, workspace_root, session_id or network)",
            )
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
    if math.isnan(t) or t < 0:
        raise ValueError(f"timeout must be a non-negative number of seconds, got {_rust_f64(t)}")
    # math.inf is no limit, as it is locally.
    return None if math.isinf(t) else t


# How long the transport gets to answer ``initialize`` by default: an ssh
# or kubectl that connects in seconds has ample room (a ``docker run`` that
# pulls an image may need None), and one that never answers (a host that
# drops packets, a prompt nobody sees) ends the wait.
_CONNECT_TIMEOUT_MS = 120_000


def _connect_timeout(v: object) -> Tuple[Optional[float], str]:
    """``connect_timeout_ms`` in seconds (None, infinity or past any float:
    no limit), and as the errors write it."""
    if v is None:
        return None, ""
    refused = _invalid("connect_timeout_ms", f"must be a positive number of milliseconds or None, got {v!r}")
    if isinstance(v, (bool, str, bytes, bytearray)):
        raise refused
    try:
        ms = float(v)  # type: ignore[arg-type]
    except OverflowError:
        return None, ""
    except (TypeError, ValueError):
        raise refused from None
    if not ms > 0:  # NaN too
        raise refused
    if math.isinf(ms):
        return None, ""
    return ms / 1000, str(int(ms)) if ms.is_integer() else repr(ms)


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
