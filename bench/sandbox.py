"""Sandbox overhead: a trivial program through ``run_python`` vs a bare ``python -c`` in the same run.

    python bench/sandbox.py [--n 20]

Prints the median and mean of both and their ratio (compare ratios, not absolute times: the
machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from research_agent.code.sandbox import isolation_level, run_python

PROGRAM = "print(1 + 1)"


def _time(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="runs of each")
    args = ap.parse_args()
    level = isolation_level()  # probe once, outside the timing

    def bare() -> None:
        out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, check=True).stdout
        assert out == b"2\n"

    def sandboxed() -> None:
        res = run_python(PROGRAM)
        assert res.ok and res.stdout == "2\n", res

    bare(), sandboxed()  # warm the page cache
    b, s = [], []
    for _ in range(args.n):  # interleave, so drift in machine load hits both equally
        b += _time(bare, 1)
        s += _time(sandboxed, 1)
    mb, ms = statistics.median(b), statistics.median(s)
    print(f"isolation level: {level}")
    print(
        f"bare python -c : median {mb * 1000:7.1f} ms   mean {statistics.mean(b) * 1000:7.1f} ms   (n={args.n})"
    )
    print(
        f"run_python     : median {ms * 1000:7.1f} ms   mean {statistics.mean(s) * 1000:7.1f} ms   (n={args.n})"
    )
    print(f"overhead       : {(ms - mb) * 1000:7.1f} ms per run, {ms / mb:.2f}x bare")


if __name__ == "__main__":
    main()
