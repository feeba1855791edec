"""The remote executor (docs/remote.md) beside its floors. Prints one JSON
row per measurement. Usage: remote.py QUICK(0|1)

- run(`true`): local Executor; remote over a unix socket and over a pipe to
  `dsh serve --stdio`; remote over ssh to this machine, against `ssh host
  true` (the remote floor: what one command over ssh costs anyway).
- throughput: a run whose result holds N MiB of output, locally, over a
  pipe and over ssh; and N MiB streamed as it comes (`run {stream: true}`,
  read by a bare protocol client), over a pipe and over ssh, against the
  same bytes through the pipe or ssh alone (the floor).
- 1000 background processes over one connection, against the local
  executor.
- memory per lingering session of `dsh serve --listen --linger`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from dsh_native import Executor  # noqa: E402
from dsh_native.remote import Executor as RemoteExecutor  # noqa: E402
from sshd_server import Unavailable, running_sshd  # noqa: E402

QUICK = sys.argv[1:] == ["1"]
DSH = os.path.join(ROOT, "target", "debug" if QUICK else "release", "dsh")
ITER = 20 if QUICK else 300
STREAM_MIB = 4 if QUICK else 32
STARTS = 50 if QUICK else 1000
SESSIONS = 5 if QUICK else 50


def row(bench: str, impl: str, **fields: Any) -> None:
    print(json.dumps({"bench": bench, "impl": impl, **fields}), flush=True)


def latency(bench: str, impl: str, once: Callable[[], None], n: int = ITER) -> float:
    for _ in range(3):
        once()
    samples: List[float] = []
    for _ in range(n):
        t = time.perf_counter()
        once()
        samples.append((time.perf_counter() - t) * 1e6)
    samples.sort()
    med = statistics.median(samples)
    row(bench, impl, median_us=med, min_us=samples[0], max_us=samples[-1], n=n)
    return med


def run_true(ex: Any) -> Callable[[], None]:
    spec = ex.resolve("true")
    return lambda: ex.run(spec)


def stream(ex: Any, impl: str) -> None:
    """A result of N MiB of output through the connection."""
    size = STREAM_MIB << 20
    spec = ex.resolve(f"head -c {size} /dev/zero | tr '\\0' x", stdout_max_bytes=size, timeout_ms=600_000)
    t = time.perf_counter()
    got = len(ex.run(spec).stdout.text)
    secs = time.perf_counter() - t
    assert got == size, f"{got} of {size} bytes"
    row("remote_stream", impl, mib=STREAM_MIB, seconds=secs, mib_per_s=STREAM_MIB / secs)


def streamed(transport: List[str], impl: str) -> None:
    """N MiB streamed by `run {stream: true}` to a bare client that decodes
    every chunk: the protocol's cost, without a client library's."""
    import base64
    size = STREAM_MIB << 20
    server = subprocess.Popen(transport, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin and server.stdout
    def send(i: int, method: str, params: Any) -> None:
        server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")
        server.stdin.flush()
    def answer(i: int) -> Any:
        while True:
            m = json.loads(server.stdout.readline())
            if m.get("id") == i:
                return m["result"]
    try:
        send(1, "initialize", {"protocol_version": 1})
        answer(1)
        send(2, "resolve", {"request": {"command": f"head -c {size} /dev/zero", "timeout_ms": 600_000}})
        spec = answer(2)["spec"]
        t = time.perf_counter()
        send(3, "run", {"spec": spec, "run_id": "s", "stream": True})
        got = 0
        while True:
            m = json.loads(server.stdout.readline())
            if m.get("method") == "run_output":
                got += len(base64.b64decode(m["params"]["data_base64"]))
            elif m.get("id") == 3:
                break
        secs = time.perf_counter() - t
        assert got == size, f"{got} of {size} bytes streamed"
        row("remote_streamed", impl, mib=STREAM_MIB, seconds=secs, mib_per_s=STREAM_MIB / secs)
    finally:
        server.stdin.close()
        server.wait(60)


def floor_stream(transport: List[str], impl: str) -> None:
    """The same bytes through the transport alone."""
    size = STREAM_MIB << 20
    t = time.perf_counter()
    out = subprocess.run(transport + [f"head -c {size} /dev/zero"], stdout=subprocess.PIPE, check=True).stdout
    secs = time.perf_counter() - t
    assert len(out) == size
    row("remote_streamed", impl, mib=STREAM_MIB, seconds=secs, mib_per_s=STREAM_MIB / secs)


def starts(ex: Any, impl: str) -> None:
    spec = ex.resolve("sleep 0.2")
    t = time.perf_counter()
    ps = [ex.start(spec) for _ in range(STARTS)]
    for p in ps:
        p.wait(120)
    secs = time.perf_counter() - t
    row("remote_starts", impl, n=STARTS, seconds=secs)
    for p in ps:
        ex.forget(p.id)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def children(pid: int) -> List[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def lingering_memory(tmp: str) -> None:
    """RSS of the server and its supervisors (not the commands) per session
    kept after its connection ended."""
    sock = os.path.join(tmp, "linger.sock")
    server = subprocess.Popen([DSH, "serve", "--listen", f"unix:{sock}", "--linger", "300"])
    try:
        while not os.path.exists(sock):
            time.sleep(0.01)

        def footprint() -> int:
            own = [c for c in children(server.pid) if not open(f"/proc/{c}/comm").read().startswith("sleep")]
            return rss_kib(server.pid) + sum(rss_kib(c) for c in own)

        def session_left_behind() -> None:
            """A connection that starts a process and goes without dispose."""
            import socket as so
            with so.socket(so.AF_UNIX) as c:
                c.connect(sock)
                f = c.makefile("rwb")
                def call(i: int, method: str, params: Any) -> Any:
                    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")
                    f.flush()
                    while True:
                        m = json.loads(f.readline())
                        if m.get("id") == i:
                            return m["result"]
                call(1, "initialize", {"protocol_version": 1})
                spec = call(2, "resolve", {"request": {"command": "echo started; sleep 300"}})["spec"]
                call(3, "start", {"spec": spec})

        # One session first, so the allocator's first growth is not counted.
        session_left_behind()
        time.sleep(0.3)
        before = footprint()
        for _ in range(SESSIONS):
            session_left_behind()
        time.sleep(0.5)
        after = footprint()
        row("remote_linger", "dsh serve --linger", sessions=SESSIONS, kib_per_session=(after - before) / SESSIONS)
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dsh-bench-remote-") as tmp:
        sock = os.path.join(tmp, "dsh.sock")
        server = subprocess.Popen([DSH, "serve", "--listen", f"unix:{sock}"])
        try:
            while not os.path.exists(sock):
                time.sleep(0.01)
            with Executor() as local:
                latency("remote_run_true", "local (Python)", run_true(local))
                stream(local, "local (Python)")
                starts(local, "local (Python)")
            with RemoteExecutor(socket=sock) as ex:
                latency("remote_run_true", "remote, unix socket (Python)", run_true(ex))
            with RemoteExecutor([DSH, "serve", "--stdio"]) as ex:
                latency("remote_run_true", "remote, pipe (Python)", run_true(ex))
                stream(ex, "remote, pipe (Python)")
                starts(ex, "remote, pipe (Python)")
            streamed([DSH, "serve", "--stdio"], "streamed, pipe")
            floor_stream(["sh", "-c"], "pipe alone (the floor)")
        finally:
            server.terminate()
            server.wait(60)
        try:
            with running_sshd() as sshd:
                latency("remote_run_true", "ssh host true (the remote floor)",
                        lambda: subprocess.run(sshd.ssh("true"), check=True), n=max(5, ITER // 10))
                with RemoteExecutor(sshd.serve_command(DSH)) as ex:
                    latency("remote_run_true", "remote, ssh (Python)", run_true(ex))
                    stream(ex, "remote, ssh (Python)")
                streamed(sshd.serve_command(DSH), "streamed, ssh")
                floor_stream(sshd.ssh(), "ssh alone (the floor)")
        except Unavailable as why:
            row("remote_ssh_unavailable", str(why))
        lingering_memory(tmp)


if __name__ == "__main__":
    main()
