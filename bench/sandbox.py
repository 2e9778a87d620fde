"""Sandbox overhead: a trivial program through ``run_python`` vs a bare ``python -c`` in the same run.

    python bench/sandbox.py [--n 20] [--rounds 3]

Prints the median and mean of both and their ratio in each round (the two interleaved run by run),
and the median of the rounds' ratios (compare ratios, not absolute times: the machine is shared).
The raw JSON (every run's seconds) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402
from research_agent.code.sandbox import isolation_level, run_python  # noqa: E402

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
    ap.add_argument("--n", type=int, default=20, help="runs of each per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --n interleaved runs (median of their ratios)")
    add_raw_flags(ap)
    args = ap.parse_args()
    level = isolation_level()  # probe once, outside the timing

    def bare() -> None:
        out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, check=True).stdout
        assert out == b"2\n"

    def sandboxed() -> None:
        res = run_python(PROGRAM)
        assert res.ok and res.stdout == "2\n", res

    bare(), sandboxed()  # warm the page cache
    print(f"isolation level: {level}")
    rounds, ratios = [], []
    for i in range(max(1, args.rounds)):
        b, s = [], []
        for _ in range(args.n):  # interleave, so drift in machine load hits both equally
            b += _time(bare, 1)
            s += _time(sandboxed, 1)
        mb, ms = statistics.median(b), statistics.median(s)
        rounds.append({"bare_s": b, "sandboxed_s": s})
        ratios.append(ms / mb)
        print(f"round {i + 1}: bare python -c median {mb * 1000:7.1f} ms (mean {statistics.mean(b) * 1000:.1f}), "
              f"run_python median {ms * 1000:7.1f} ms (mean {statistics.mean(s) * 1000:.1f}), n={args.n}: "
              f"{(ms - mb) * 1000:.1f} ms per run, {ms / mb:.2f}x bare")
    print(f"run_python / bare, median of the rounds: {statistics.median(ratios):.2f}x "
          f"({' / '.join(f'{r:.2f}' for r in ratios)})")
    write_raw("sandbox", args, {"isolation": level, "program": PROGRAM, "rounds": rounds})


if __name__ == "__main__":
    main()
