"""Scale-out on this CPU: data-parallel weak scaling, and a generation server against in-process.

    python bench/scaling.py [--steps 3] [--prompts 2] [--modes single,dp2,server] [--rounds 1]

Every mode runs the same RL work per process through ``python -m research_agent.train`` on
``smollm2-135m`` (fresh LoRA r16 q/v), REINFORCE, G=4, 4 turns, 3 tool calls, 48 tokens per turn,
temperature 1.0, KL 0, group filters off (every step updates on every trajectory), over a small real
Factbook corpus holding the training questions' profiles. Each process gets one torch thread:

- ``single``: one process, ``--prompts`` prompts per step (the reference);
- ``dp2``: ``accelerate launch --multi_gpu --num_processes 2`` (torchrun, gloo, CPU), 2 x ``--prompts``
  prompts per step, so each process has the reference's work: weak-scaling efficiency is
  ``single`` s/step / ``dp2`` s/step (goal >= 0.8);
- ``server``: ``python -m research_agent.inference.serve`` in its own process generates the rollouts in token
  space (``--rollout-endpoint``), the trainer publishes its adapter there after every step;
  ``--prompts`` prompts per step, beside ``single``: the ratio and where its time goes
  (rollout on the server, the update, publishing the adapter).

Seconds per step are the mean over steps after the first (the first includes warm-up). The machine
is shared and noisy: ``--rounds R`` repeats the modes alternately and reports each round.  The raw
JSON (every mode of every round) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_check import EXTRA_GECS, pick_questions  # noqa: E402
from bench.raw import add_raw_flags, write_raw  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
       "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rl_argv(tasks: Path, corpus: Path, prompts: int, steps: int, out: Path) -> list[str]:
    return ["--stage", "rl", "--model", "smollm2-135m", "--tasks", str(tasks), "--corpus", str(corpus),
            "--algorithm", "reinforce", "--group-size", "4", "--prompts-per-step", str(prompts), "--steps", str(steps),
            "--lr", "2e-4", "--kl-coef", "0", "--temperature", "1.0", "--max-turns", "4", "--max-tool-calls", "3",
            "--max-new-tokens", "48", "--filter-low", "0", "--filter-high", "1", "--filter-zero-variance", "false",
            "--drop-void-turns", "false", "--checkpoint-every", "1000", "--concurrency", str(4 * prompts),
            "--device", "cpu", "--out", str(out)]


def run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=ROOT, env=ENV, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({done.returncode}):\n{log.read_text()[-3000:]}")


def summarize(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    later = rows[1:] or rows
    mean = lambda key: statistics.mean(r.get(key, 0.0) for r in later)  # noqa: E731
    return {"s_per_step": mean("seconds"), "rollout_s": mean("rollout_seconds"),
            "publish_s": mean("publish_seconds"), "trajectories": [r["trained_trajectories"] for r in rows],
            "gen_tokens": mean("gen_tokens")}


def mode_single(tmp: Path, tasks: Path, corpus: Path, args, tag: str) -> dict:
    out = tmp / f"single-{tag}"
    run([sys.executable, "-m", "research_agent.train", *rl_argv(tasks, corpus, args.prompts, args.steps, out)],
        tmp / f"single-{tag}.log")
    return summarize(out)


def mode_dp2(tmp: Path, tasks: Path, corpus: Path, args, tag: str) -> dict:
    out = tmp / f"dp2-{tag}"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(free_port()), "-m", "research_agent.train"]
    run([*launch, *rl_argv(tasks, corpus, 2 * args.prompts, args.steps, out)], tmp / f"dp2-{tag}.log")
    return summarize(out)


def mode_server(tmp: Path, tasks: Path, corpus: Path, args, tag: str) -> dict:
    out = tmp / f"server-{tag}"
    server = subprocess.Popen([sys.executable, "-m", "research_agent.inference.serve", "--model", "smollm2-135m",
                               "--port", "0", "--device", "cpu"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        match = re.search(r"http://[\d.]+:(\d+)/v1", line)
        if not match:
            raise SystemExit(f"the generation server did not start: {line!r}")
        url = f"http://127.0.0.1:{match.group(1)}"
        run([sys.executable, "-m", "research_agent.train", *rl_argv(tasks, corpus, args.prompts, args.steps, out),
             "--rollout-endpoint", url], tmp / f"server-{tag}.log")
    finally:
        server.kill()
        server.wait()
    return summarize(out)


MODES = {"single": mode_single, "dp2": mode_dp2, "server": mode_server}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step per process")
    ap.add_argument("--modes", default="single,dp2,server")
    ap.add_argument("--rounds", type=int, default=1)
    add_raw_flags(ap)
    args = ap.parse_args()
    modes = args.modes.split(",")
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    with tempfile.TemporaryDirectory(prefix="ra-bench-scaling-") as name:
        tmp = Path(name)
        questions = pick_questions(16)
        tasks = tmp / "tasks.jsonl"
        tasks.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
        gecs = sorted({d.split("/", 1)[1] for q in questions for d in q["supporting_docs"]} | set(EXTRA_GECS))
        build_corpus(out=tmp / "corpus", documents=list(factbook_documents(gecs=gecs)), progress=False)
        print(f"{len(questions)} training questions, corpus of {len(gecs)} Factbook profiles; "
              f"{args.steps} steps, {args.prompts} prompts x G4 per process per step, 1 thread per process",
              flush=True)
        results: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for m in modes:
                t0 = time.perf_counter()
                res = MODES[m](tmp, tasks, tmp / "corpus", args, str(r))
                results[m].append(res)
                print(f"round {r + 1} {m:>6}: {res['s_per_step']:.1f} s/step (rollout {res['rollout_s']:.1f} s, "
                      f"publish {res['publish_s']:.2f} s), {res['gen_tokens']:.0f} tokens/trajectory, trained "
                      f"{res['trajectories']} ({time.perf_counter() - t0:.0f} s wall)", flush=True)
        if "single" in results:
            for r in range(args.rounds):
                ref = results["single"][r]["s_per_step"]
                if "dp2" in results:
                    d = results["dp2"][r]
                    print(f"round {r + 1}: weak-scaling efficiency (single / dp2 s/step, 2x the prompts on 2 "
                          f"processes) {ref / d['s_per_step']:.2f} (goal >= 0.8)")
                if "server" in results:
                    s = results["server"][r]
                    print(f"round {r + 1}: server / in-process s/step {s['s_per_step'] / ref:.2f} "
                          f"(rollout {s['rollout_s']:.1f} vs {results['single'][r]['rollout_s']:.1f} s, update "
                          f"{s['s_per_step'] - s['rollout_s'] - s['publish_s']:.1f} vs "
                          f"{ref - results['single'][r]['rollout_s']:.1f} s, publish {s['publish_s']:.2f} s)")
        write_raw("scaling", args, {"questions": len(questions), "profiles": len(gecs),
                                    "rounds": [{m: results[m][r] for m in modes} for r in range(args.rounds)]})


if __name__ == "__main__":
    main()
