"""Python drivers. Usage:
  bench.py latency ITER HOST_MB dsh|subprocess   run `true`
  bench.py read ITER                             read_output() on an idle process
"""

import json
import os
import subprocess
import sys
import time

from dsh_native import Executor


FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "bench", "floor")


# Floor spawns, then as many timed operations, in one block; the first of
# each is left out (it pays for what the other kind left behind).
BLOCK = 10


def interleaved(iters, once):
    """``once`` timed ``iters`` times, interleaved with as many spawns of
    the C floor (floor.c's lockstep) in blocks of BLOCK, after five warm-up
    rounds: both meet the machine as it is then. Returns (samples, floors)
    in microseconds."""
    floor = subprocess.Popen([FLOOR, "lockstep"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def floor_spawns(n):
        floor.stdin.write(b"x" * n)
        return [float(floor.stdout.readline()) for _ in range(n)]

    for _ in range(5):
        floor_spawns(1)
        once()
    samples, floors = [], []
    while len(samples) < iters:
        floors += floor_spawns(BLOCK)[1:]
        for i in range(BLOCK):
            t = time.perf_counter()
            once()
            if i > 0:
                samples.append((time.perf_counter() - t) * 1e6)
    floor.stdin.close()
    floor.wait()
    return samples[:iters], floors[:iters]


def report(bench, impl, host_mb, samples, **extra):
    samples.sort()
    print(json.dumps({"bench": bench, "impl": impl, "host_mb": host_mb, "median_us": samples[len(samples) // 2],
                      "min_us": samples[0], "max_us": samples[-1], "n": len(samples), **extra}), flush=True)


def ballast(mb):
    b = bytearray(mb << 20)
    b[::4096] = b"\x01" * len(range(0, len(b), 4096))  # touch every page
    return b


def main():
    mode = sys.argv[1]
    if mode == "latency":
        iters, mb, which = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        keep = ballast(mb)
        with Executor() as ex:
            spec = ex.resolve("true")
            if which == "subprocess":
                def once():
                    subprocess.run(["bash", "-c", "true"], capture_output=True)
            else:
                def once():
                    ex.run(spec)
            samples, floors = interleaved(iters, once)
        floors.sort()
        report("run_true", "Python subprocess" if which == "subprocess" else "dsh (Python)", mb, samples,
               paired_floor_us=floors[len(floors) // 2])
        del keep
    elif mode == "read":
        iters = int(sys.argv[2])
        with Executor() as ex:
            p = ex.start(ex.resolve("exec sleep 60"))
            samples = []
            for _ in range(25):
                t = time.perf_counter()
                for _ in range(iters):
                    p.read_output()
                samples.append((time.perf_counter() - t) * 1e6 / iters)
        report("read_idle", "dsh (Python)", 0, samples)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
