"""Runs every benchmark driver in one go on this machine and prints a table
of ratios against the floor (medians, with min/max), writes
bench/results.md and, with matplotlib, bench/latency-vs-host-memory.png.

Usage: python bench/report.py [--quick]   (bench/run builds everything first)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = "--quick" in sys.argv
ITER = 20 if QUICK else 1500
ROUNDS = 1 if QUICK else 5
HOSTS = [0] if QUICK else [0, 512, 1024, 2048]
THROUGHPUT_BYTES = (16 << 20) if QUICK else (1 << 30)
STARTS = 50 if QUICK else 1000
TERMINAL_BYTES = (1 << 20) if QUICK else (16 << 20)
KEYS = 20 if QUICK else 1000
READS = 1000 if QUICK else 20000

Row = Dict[str, Any]


def run(cmd: List[str]) -> List[Row]:
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def py() -> str:
    return os.path.join(ROOT, ".venv", "bin", "python")


def by_rounds(rounds: Dict[Any, List[Row]]) -> List[Row]:
    """One row per implementation and host size from its rounds: the median
    of their medians, and as its ratio to the floor the median of the
    ratios within each round (each round's own floor spawns, interleaved
    with its runs)."""
    rows: List[Row] = []
    for rs in rounds.values():
        first = rs[0]
        rows.append({"bench": first["bench"], "impl": first["impl"], "host_mb": first.get("host_mb", 0),
                     "median_us": statistics.median(r["median_us"] for r in rs),
                     "min_us": min(r["min_us"] for r in rs), "max_us": max(r["max_us"] for r in rs),
                     "n": sum(r["n"] for r in rs), "ratio": statistics.median(r["ratio"] for r in rs),
                     **({"paired_floor_us": statistics.median(r["paired_floor_us"] for r in rs)}
                        if all("paired_floor_us" in r for r in rs) else {})})
    return rows


def latency_rows() -> List[Row]:
    """Every implementation, at every host size, in ROUNDS rounds run back to
    back, so that a machine that drifts (other tenants of the VM's host,
    frequency) weighs on all of them alike (see `by_rounds`)."""
    rounds: Dict[Any, List[Row]] = {}
    for mb in HOSTS:
        for _ in range(ROUNDS):
            it = str(ITER // ROUNDS)
            # Slow references get fewer iterations at large host sizes.
            slow = str(max(10, ITER // ROUNDS // (1 + mb // 512)))
            got = run(["target/bench/floor", "latency", it, str(mb)])
            got += run(["target/release/dsh-bench", "latency", it, str(mb)])
            got += run(["target/bench/dsh_c", "latency", it, str(mb)])
            got += run(["node", "bench/node/bench.js", "latency", it, str(mb), "dsh"])
            got += run(["node", "bench/node/bench.js", "latency", slow, str(mb), "cp"])
            got += run([py(), "bench/python/bench.py", "latency", it, str(mb), "dsh"])
            got += run([py(), "bench/python/bench.py", "latency", it, str(mb), "subprocess"])
            floor = next(r["median_us"] for r in got if r["impl"] == "floor (C posix_spawn)")
            for r in got:
                # Every dsh row and its language's reference interleave their
                # runs with floor spawns (in-process, or floor.c's lockstep).
                r["ratio"] = r["median_us"] / r.get("paired_floor_us", floor)
                rounds.setdefault((r["impl"], mb), []).append(r)
    return by_rounds(rounds)


def throughput_floor(nbytes: int) -> Row:
    samples = []
    target = os.path.join(ROOT, "target", "bench", "floor-out")
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", f"head -c {nbytes} /dev/zero | cat > {target}"], check=True)
        samples.append((time.perf_counter() - t) * 1e6)
        os.unlink(target)
    samples.sort()
    return {"bench": "throughput", "impl": "floor (head | cat > file)", "median_us": samples[1], "min_us": samples[0],
            "max_us": samples[2], "n": 3, "bytes": nbytes}


def node_pty_missing() -> str:
    """Why node-pty cannot be compared here ('' when it can)."""
    where = os.environ.get("NODE_PTY_DIR", "")
    if not where:
        return "NODE_PTY_DIR is not set (bench/run sets it)"
    probe = subprocess.run(["node", "-e", "require('node-pty')"], cwd=where, capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"node-pty does not load from {where}: {probe.stderr.strip()[:200]}"


def terminal_rows() -> List[Row]:
    rows = run(["target/release/dsh-bench", "terminal-spawn", str(ITER)])
    rows += run(["target/release/dsh-bench", "terminal-echo", str(KEYS)])
    rows += run(["target/release/dsh-bench", "terminal-throughput", str(TERMINAL_BYTES)])
    impls = ["dsh"] + ([] if node_pty_missing() else ["pty"])
    for which in impls:
        rows += run(["node", "bench/node/terminal.js", "echo", str(KEYS), which])
        rows += run(["node", "bench/node/terminal.js", "throughput", str(TERMINAL_BYTES), which])
        rows += run(["node", "bench/node/terminal.js", "spawn", str(ITER), which])
    return rows


def subprocess_rows() -> List[Row]:
    """`ctx.subprocess`: dsh-native/subprocess beside the published provider,
    each loaded in a cordis Context as the harness loads it."""
    rows: List[Row] = run(["target/release/dsh-bench", "spawn", str(ITER)])
    drv = ["node", "bench/node/subprocess.mjs"]
    # Spawns in ROUNDS rounds, as `latency_rows` runs them.
    rounds: Dict[Any, List[Row]] = {}
    for mb in HOSTS:
        slow = str(max(10, ITER // ROUNDS // (1 + mb // 512)))
        for _ in range(ROUNDS):
            for mode in ["collect", "pipe"]:
                got = run(drv + ["spawn", str(ITER // ROUNDS), str(mb), "native", mode])
                got += run(drv + ["spawn", slow, str(mb), "published", mode])
                for r in got:
                    r["ratio"] = r["median_us"] / r["paired_floor_us"]
                    rounds.setdefault((r["bench"], r["impl"], mb), []).append(r)
    rows += by_rounds(rounds)
    for which in ["native", "published"]:
        rows += run(drv + ["pipe", str(64 << 20), which])
        rows += run(drv + ["echo", str(KEYS), which])
        rows += run(drv + ["terminal-throughput", str(TERMINAL_BYTES), which])
        rows += run(drv + ["terminal-spawn", str(max(10, ITER // 10)), which])
    return rows


def subprocess_table(rows: List[Row], get: Any) -> List[str]:
    native, published = "dsh-native/subprocess", "dsh-subprocess-local"
    lines = ["\n### `ctx.subprocess`: dsh-native/subprocess beside the published provider (dsh-subprocess-local)\n"]
    lines.append("Spawn of `bash -c true` (the floor's program) until `done`, stdout and stderr collected "
                 f"(`{{ maxBytes }}`) or piped (read to the end); {ROUNDS} rounds, each interleaved with floor "
                 "spawns, ratios as for `run` above:\n")
    lines.append("| stdio | host memory | dsh-native/subprocess | × floor | dsh-subprocess-local | × floor | target |")
    lines.append("|---|---|---|---|---|---|---|")
    small: Dict[str, float] = {}
    for mode in ["collect", "pipe"]:
        for mb in HOSTS:
            # Each interleaved with floor spawns (the median of those in brackets).
            nr = get(f"subprocess_spawn_{mode}", native, mb)
            pr = get(f"subprocess_spawn_{mode}", published, mb)
            n, p = nr["median_us"], pr["median_us"]
            n_ratio, p_ratio = nr["ratio"], pr["ratio"]
            if mb == 0:
                small[mode] = n_ratio
                target = f"≤ 1.2× floor {'✅' if n_ratio <= 1.2 else '❌'}"
            else:
                flat = n_ratio / small[mode]
                target = f"{flat:.2f}× small host (flat: ≤ 1.2 {'✅' if flat <= 1.2 else '❌'})"
            lines.append(f"| {mode} | {mb} MiB | {fmt_us(n)} | {n_ratio:.2f} ({fmt_us(nr['paired_floor_us'])}) | "
                         f"{fmt_us(p)} | {p_ratio:.2f} ({fmt_us(pr['paired_floor_us'])}) | {target} |")
    rust = get("spawn_true", "dsh (Rust)")
    lines.append(f"\nThe same spawn from the Rust face (`Executor::spawn`, until settled): {fmt_us(rust['median_us'])}, "
                 f"{rust['median_us'] / rust['paired_floor_us']:.2f}× the floor; `run` of `true`: "
                 f"{get('run_true', 'dsh (Rust)')['ratio']:.2f}×.")
    lines.append("\n| measure | dsh-native/subprocess | dsh-subprocess-local |")
    lines.append("|---|---|---|")
    mbps = lambda r: r["bytes"] / (r["median_us"] / 1e6) / 1e6  # noqa: E731
    for bench, what in [("subprocess_pipe", "64 MiB through a raw stdout pipe"),
                        ("subprocess_terminal_throughput", f"{TERMINAL_BYTES >> 20} MiB through a terminal")]:
        n, p = get(bench, native), get(bench, published)
        lines.append(f"| {what}: time, throughput, bytes lost | {fmt_us(n['median_us'])}, {mbps(n):.0f} MB/s, "
                     f"{n['lost_bytes']} | {fmt_us(p['median_us'])}, {mbps(p):.0f} MB/s, {p['lost_bytes']} |")
    n, p = get("subprocess_terminal_echo", native), get("subprocess_terminal_echo", published)
    lines.append(f"| keystroke → echo through a raw-mode `cat` ({KEYS} keys), median | {fmt_us(n['median_us'])} | "
                 f"{fmt_us(p['median_us'])} |")
    n, p = get("subprocess_terminal_spawn", native), get("subprocess_terminal_spawn", published)
    lines.append(f"| terminal spawn of `true` until its output ended, median | {fmt_us(n['median_us'])} | "
                 f"{fmt_us(p['median_us'])} |")
    lines.append(f"| bytes of `seq 1 20000` lost at the program's exit | {n['lost_bytes']} | {p['lost_bytes']} |")
    return lines


def remote_table(rows: List[Row]) -> List[str]:
    """docs/remote.md's figures: the Python remote executor against the local
    one and against what ssh costs anyway."""
    of = {(r["bench"], r["impl"]): r for r in rows if r["bench"].startswith("remote_")}
    lines = ["\n### The remote executor (`dsh serve`; Python client; ssh to this machine)\n"]
    lines.append("| measure | value | against |")
    lines.append("|---|---|---|")
    local = of[("remote_run_true", "local (Python)")]
    for impl in ["remote, unix socket (Python)", "remote, pipe (Python)"]:
        r = of[("remote_run_true", impl)]
        lines.append(f"| `run` of `true`, {impl.split(',')[1].split('(')[0].strip()} | {fmt_us(r['median_us'])} | "
                     f"local {fmt_us(local['median_us'])}: ×{r['median_us'] / local['median_us']:.2f} |")
    unavailable = next((r for (b, _), r in of.items() if b == "remote_ssh_unavailable"), None)
    if unavailable:
        lines.append(f"| over ssh | not measured: {unavailable['impl']} | |")
    else:
        floor, r = of[("remote_run_true", "ssh host true (the remote floor)")], of[("remote_run_true", "remote, ssh (Python)")]
        lines.append(f"| `run` of `true` over one ssh connection | {fmt_us(r['median_us'])} | `ssh host true` "
                     f"{fmt_us(floor['median_us'])}: ×{r['median_us'] / floor['median_us']:.3f} |")
    for impl in ["local (Python)", "remote, pipe (Python)", "remote, ssh (Python)"]:
        r = of.get(("remote_stream", impl))
        if r:
            lines.append(f"| a {r['mib']} MiB result, {impl} | {r['mib_per_s']:.0f} MiB/s | |")
    for via in ["pipe", "ssh"]:
        r, floor = of.get(("remote_streamed", f"streamed, {via}")), of.get(("remote_streamed", f"{via} alone (the floor)"))
        if r and floor:
            lines.append(f"| {r['mib']} MiB streamed as it comes (`run {{stream: true}}`, bare client), {via} | "
                         f"{r['mib_per_s']:.0f} MiB/s | the {via} alone {floor['mib_per_s']:.0f} MiB/s |")
    ls, rs = of[("remote_starts", "local (Python)")], of[("remote_starts", "remote, pipe (Python)")]
    lines.append(f"| {rs['n']} background `sleep 0.2` over one connection, all settled | {rs['seconds'] * 1000:.0f} ms | "
                 f"local {ls['seconds'] * 1000:.0f} ms |")
    lg = of[("remote_linger", "dsh serve --linger")]
    lines.append(f"| memory per lingering session (server and its supervisor; {lg['sessions']} sessions) | "
                 f"{lg['kib_per_session']:.0f} KiB | |")
    return lines


def fmt_us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.2f} µs"


def main() -> None:
    rows = latency_rows()
    rows += run(["target/release/dsh-bench", "confined", str(ITER)])
    rows += run(["target/release/dsh-bench", "throughput", str(THROUGHPUT_BYTES)])
    rows += run(["target/release/dsh-bench", "supervisor", str(max(5, ITER // 10))])
    rows += run(["target/release/dsh-bench", "host-death", str(2 if QUICK else 10), str(2 if QUICK else 10)])
    rows.append(throughput_floor(THROUGHPUT_BYTES))
    rows += run(["target/bench/floor", "starts", str(STARTS)])
    rows += run(["node", "bench/node/bench.js", "starts", str(STARTS)])
    rows += run(["target/bench/dsh_c", "read", str(READS)])
    rows += run(["node", "bench/node/bench.js", "read", str(READS)])
    rows += run([py(), "bench/python/bench.py", "read", str(READS)])
    rows += terminal_rows()
    rows += subprocess_rows()
    rows += run([py(), "bench/python/remote.py", "1" if QUICK else "0"])

    def get(bench: str, impl: str, host_mb: int = 0) -> Row:
        return next(r for r in rows if r["bench"] == bench and r["impl"] == impl and r.get("host_mb", 0) == host_mb)

    lines: List[str] = []
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    machine = (f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Linux {platform.release()}, "
               f"{date.today().isoformat()}{' — QUICK MODE, not representative' if QUICK else ''}")
    lines.append(f"Machine: {machine}\n")

    lines.append(f"### `run` of `true` (median, min–max; ratio to the floor: the median over {ROUNDS} rounds "
                 "of the ratio of medians within a round; each implementation's runs interleaved with floor spawns "
                 "in blocks of 10, the first of each block left out: in-process for Rust and C, by a C floor "
                 "process in lockstep for Node and Python; the median of those floor spawns in brackets. "
                 "× small host: that ratio against the same row's at host size 0; the floor's own median "
                 "for the floor)\n")
    lines.append("| implementation | host memory | median | min – max | × floor | target |")
    lines.append("|---|---|---|---|---|---|")
    targets = {"dsh (Rust)": 1.1, "dsh (C)": 1.1, "dsh (Node)": 1.2, "dsh (Python)": 1.2}
    small: Dict[str, float] = {}
    for mb in HOSTS:
        for impl in ["floor (C posix_spawn)", "dsh (Rust)", "dsh (C)", "dsh (Node)", "Node child_process",
                     "dsh (Python)", "Python subprocess"]:
            r = get("run_true", impl, mb)
            ratio = r["ratio"]
            # Against the small host: an interleaved row's ratio to the
            # floor (the drift between two sizes' runs left out), the
            # floor's own median.
            size_cost = ratio if "paired_floor_us" in r else r["median_us"]
            if mb == 0:
                small[impl] = size_cost
            target = ""
            if impl in targets:
                if mb == 0:
                    ok = ratio <= targets[impl]
                    target = f"≤ {targets[impl]}× {'✅' if ok else '❌'}"
                else:
                    host_ratio = size_cost / small[impl]
                    target = f"{host_ratio:.2f}× small host (≤ 1.2 {'✅' if host_ratio <= 1.2 else '❌'})"
            elif mb and impl in small:
                target = f"{size_cost / small[impl]:.2f}× small host"
            of = f" ({fmt_us(r['paired_floor_us'])})" if "paired_floor_us" in r else ""
            lines.append(f"| {impl} | {mb} MiB | {fmt_us(r['median_us'])} | {fmt_us(r['min_us'])} – "
                         f"{fmt_us(r['max_us'])} | {ratio:.2f}{of} | {target} |")

    lines.append("\n### `run` of `true` under native Landlock confinement (host memory 0)\n")
    lines.append("| mode | median | min – max | × floor | × unconfined |")
    lines.append("|---|---|---|---|---|")
    floor0 = get("run_true", "floor (C posix_spawn)")["median_us"]
    # The unconfined run's own median (`small` holds its ratio to the floor).
    unconfined = get("run_true", "dsh (Rust)")["median_us"]
    for mode in ["read-only", "workspace-write"]:
        r = get("run_true", f"dsh (Rust, {mode})")
        # In its read-only mounts where the host has them (docs/sandbox.md).
        shown = f"{mode} + read-only mounts" if r.get("metadata") else f"{mode} (Landlock only)"
        lines.append(f"| {shown} | {fmt_us(r['median_us'])} | {fmt_us(r['min_us'])} – {fmt_us(r['max_us'])} | "
                     f"{r['median_us'] / floor0:.2f} | {r['median_us'] / unconfined:.2f} |")

    # The governor (docs/limits.md): each network policy and each kind of
    # limit against the unconfined run (network `allow` is that row;
    # `loopback` is measured where it can run: root and cgroup v2).
    lines.append("\n### `run` of `true` under a network policy and limits (host memory 0)\n")
    lines.append("| policy / limits | median | min – max | × floor | × unconfined |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| network allow (unconfined) | {fmt_us(unconfined)} | | {unconfined / floor0:.2f} | 1.00 |")
    for label in ["network deny", "workspace-write + network deny", "network loopback", "rlimit limits",
                  "cgroup limits", "all limits"]:
        found = [x for x in rows if x["bench"] == "run_true" and x["impl"] == f"dsh (Rust, {label})"]
        if not found:
            lines.append(f"| {label} | not measured here (unavailable on this host) | | | |")
            continue
        r = found[0]
        lines.append(f"| {label} | {fmt_us(r['median_us'])} | {fmt_us(r['min_us'])} – {fmt_us(r['max_us'])} | "
                     f"{r['median_us'] / floor0:.2f} | {r['median_us'] / unconfined:.2f} |")

    t = get("throughput", "dsh (Rust)")
    f = get("throughput", "floor (head | cat > file)")
    gbps = lambda r: r["bytes"] / (r["median_us"] / 1e6) / 1e9  # noqa: E731
    ok = gbps(t) >= min(2.0, 0.8 * gbps(f))
    lines.append(f"\n### Capturing {THROUGHPUT_BYTES >> 20} MiB of stdout with a 64 KiB cap\n")
    lines.append("| implementation | median | throughput | host memory growth | target |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| floor (`head … \\| cat > file`) | {fmt_us(f['median_us'])} | {gbps(f):.2f} GB/s | | |")
    lines.append(f"| dsh (Rust) | {fmt_us(t['median_us'])} | {gbps(t):.2f} GB/s | {t['rss_growth_kib']} KiB | "
                 f"≥ min(2 GB/s, 0.8× floor) {'✅' if ok else '❌'}; growth ≤ 8 MiB "
                 f"{'✅' if t['rss_growth_kib'] <= 8192 else '❌'} |")

    sb = get("start_block", "dsh (Node)")
    sf = get("starts_sleep", "floor (C posix_spawn)")
    sn = get("starts_sleep", "dsh (Node)")
    idle = next(r for r in rows if r["bench"] == "idle_process")
    lines.append(f"\n### Background starts from Node ({STARTS} concurrent `sleep 0.2`)\n")
    lines.append("| measure | value | target |")
    lines.append("|---|---|---|")
    lines.append(f"| event loop blocked per `start()` (median; p99; max) | {fmt_us(sb['median_us'])}; "
                 f"{fmt_us(sb['p99_us'])}; {fmt_us(sb['max_us'])} | "
                 f"≤ 0.1 ms {'✅' if sb['median_us'] <= 100 else '❌'} |")
    ratio = sn["median_us"] / sf["median_us"]
    lines.append(f"| all started and awaited | {fmt_us(sn['median_us'])} vs floor {fmt_us(sf['median_us'])} = {ratio:.2f}× | "
                 f"≤ 1.5× {'✅' if ratio <= 1.5 else '❌'} |")
    lines.append(f"| threads before → during {STARTS} idle processes | {idle['threads_before']} → {idle['threads']} | constant "
                 f"{'✅' if idle['threads'] == idle['threads_before'] else '❌'} |")
    lines.append(f"| host memory per idle background process | {idle['bytes_per_process']} bytes | reported |")

    first = get("supervisor_first_run", "dsh (Rust)")
    second = get("supervisor_second_run", "dsh (Rust)")
    disp = get("supervisor_dispose", "dsh (Rust)")
    death = get("host_death", "dsh (Rust)")
    lines.append("\n### The per-executor supervisor (`docs/host-death.md`)\n")
    lines.append("| measure | value | target |")
    lines.append("|---|---|---|")
    lines.append(f"| first `run` of `true` on a new executor (starts its supervisor) | {fmt_us(first['median_us'])} "
                 f"vs {fmt_us(second['median_us'])} for the next one: +{fmt_us(first['median_us'] - second['median_us'])}, "
                 f"once per executor | reported |")
    lines.append(f"| `dispose()` of an idle executor (shuts its supervisor down) | {fmt_us(disp['median_us'])} | reported |")
    lines.append(f"| supervisor resident memory | {first['rss_kib']} KiB | reported |")
    lines.append(f"| host SIGKILLed with {death['commands']} commands × 8 escapes ({death['processes']} processes, "
                 f"fork loops included): all dead after (median; min – max) | {fmt_us(death['median_us'])}; "
                 f"{fmt_us(death['min_us'])} – {fmt_us(death['max_us'])} | ≤ 1 s "
                 f"{'✅' if death['max_us'] <= 1e6 else '❌'} |")

    lines.append("\n### `read_output` on an idle process\n")
    lines.append("| face | per call | target |")
    lines.append("|---|---|---|")
    for impl, limit in [("dsh (C)", 2.0), ("dsh (Node)", 20.0), ("dsh (Python)", 20.0)]:
        r = get("read_idle", impl)
        lines.append(f"| {impl} | {fmt_us(r['median_us'])} | ≤ {limit:g} µs {'✅' if r['median_us'] <= limit else '❌'} |")

    lines += terminal_table(rows, get)
    lines += subprocess_table(rows, get)
    lines += remote_table(rows)

    text = "\n".join(lines)
    print(text)
    if not QUICK:
        with open(os.path.join(ROOT, "bench", "results.md"), "w") as out:
            out.write(f"<!-- written by `bench/run` on {date.today().isoformat()} -->\n\n{text}\n")
        plot(rows)


def terminal_table(rows: List[Row], get: Any) -> List[str]:
    """Terminal sessions (docs/terminals.md) beside node-pty, and the cost
    of a terminal spawn against the plain spawn floor."""
    lines: List[str] = []
    missing = node_pty_missing()
    pty = "node-pty 1.1.0"
    has = lambda bench, impl: any(r["bench"] == bench and r["impl"] == impl for r in rows)  # noqa: E731
    lines.append("\n### Terminal sessions, beside node-pty (Node, both from the same process shape)\n")
    if missing:
        lines.append(f"node-pty left out: {missing}\n")
    lines.append("| measure | implementation | median | min – max | × node-pty |")
    lines.append("|---|---|---|---|---|")
    for bench, what in [("terminal_echo", f"keystroke → echo through a raw-mode `cat` ({KEYS} keys)"),
                        ("terminal_spawn", "spawn `true` in a terminal until its output ended")]:
        base = get(bench, pty)["median_us"] if has(bench, pty) else None
        for impl in ["dsh (Rust)", "dsh (Node)", pty]:
            if not has(bench, impl):
                continue
            r = get(bench, impl)
            ratio = f"{r['median_us'] / base:.2f}" if base else "–"
            lines.append(f"| {what} | {impl} | {fmt_us(r['median_us'])} | {fmt_us(r['min_us'])} – "
                         f"{fmt_us(r['max_us'])} | {ratio} |")
    mbps = lambda r: r["bytes"] / (r["median_us"] / 1e6) / 1e6  # noqa: E731
    lines.append(f"\n{TERMINAL_BYTES >> 20} MiB of output through a terminal (`head -c … /dev/zero`):\n")
    lines.append("| implementation | median | throughput | bytes lost |")
    lines.append("|---|---|---|---|")
    for impl in ["dsh (Rust)", "dsh (Node)", pty]:
        if has("terminal_throughput", impl):
            r = get("terminal_throughput", impl)
            lines.append(f"| {impl} | {fmt_us(r['median_us'])} | {mbps(r):.0f} MB/s | {r.get('lost_bytes', 0)} |")
    floor = get("run_true", "floor (C posix_spawn)")["median_us"]
    plain = get("run_true", "dsh (Rust)")["median_us"]
    lines.append("\nA terminal spawn against the plain spawn floor (`bash -c true` unless said):\n")
    lines.append("| spawn | median | × floor | × dsh `run` |")
    lines.append("|---|---|---|---|")
    lines.append(f"| floor (C posix_spawn) | {fmt_us(floor)} | 1.00 | |")
    lines.append(f"| dsh (Rust) `run` | {fmt_us(plain)} | {plain / floor:.2f} | 1.00 |")
    for impl in ["dsh (Rust, bash -c true)", "dsh (Rust, argv true)"]:
        r = get("terminal_spawn", impl)
        lines.append(f"| terminal, {impl} | {fmt_us(r['median_us'])} | {r['median_us'] / floor:.2f} | "
                     f"{r['median_us'] / plain:.2f} |")
    return lines


def plot(rows: List[Row]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    impls = ["floor (C posix_spawn)", "dsh (Rust)", "dsh (C)", "dsh (Node)", "Node child_process", "dsh (Python)",
             "Python subprocess"]
    for impl in impls:
        pts = sorted((r["host_mb"], r["median_us"] / 1000) for r in rows if r["bench"] == "run_true" and r["impl"] == impl)
        ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], marker="o", label=impl,
                linestyle="--" if "floor" in impl else "-")
    ax.set_xlabel("touched host memory (GiB)")
    ax.set_ylabel("median latency of run(`true`) (ms)")
    ax.set_yscale("log")
    ax.set_title(f"run latency vs host size ({date.today().isoformat()}, {os.cpu_count()} cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    out = os.path.join(ROOT, "bench", "latency-vs-host-memory.png")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
