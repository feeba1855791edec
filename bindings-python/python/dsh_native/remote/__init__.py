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

from ._checks import AnswerLost, PIPE, PROTOCOL_VERSION, ProtocolError, SandboxPolicy, TransportError
from ._results import CollectedOutput, OutputChunk, ProcessRead, RunResult, SandboxInfo, Spec
from ._process import Process, Unsubscribe
from ._terminal import Foreground, Terminal
from ._executor import Executor

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
