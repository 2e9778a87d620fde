"""Peak memory of the recipe's training stages, each setting beside the reference in the same run.

    python bench/memory.py --sft-data RECIPE/sft.jsonl [--adapter RECIPE/sft/adapter] [--demos 24]
                           [--rl-steps 2] [--stages sft,rl] [--settings default,gc,nogc]

Runs the recipe's SFT stage (``smollm2-135m``, micro-batch 4, lr 5e-4, one epoch over the first
``--demos`` demonstrations) and its RL stage (REINFORCE, 4 prompts x G=4, 4 turns, 3 tool calls,
48 tokens per turn, temperature 1.0, KL 0, for ``--rl-steps`` steps, with the group filters off so
that every step updates on all 16 trajectories: the worst case of the update) as ``python -m
research_agent.train`` subprocesses, each alone, and prints each one's peak RSS (``ru_maxrss`` of
the child) and wall time. Settings: ``default`` (what the recipe runs), ``gc`` / ``nogc``
(``--gradient-checkpointing true|false`` forced). The reference a user would otherwise run is the
stage without activation checkpointing; the issue's goal is <= 4 GB for both stages.

Make the data once with the recipe itself:

    python -m recipe --out runs/mem --demos 24 --only demonstrations sft-export sft
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

SETTINGS = {"default": [], "gc": ["--gradient-checkpointing", "true"], "nogc": ["--gradient-checkpointing", "false"]}


def stage_argv(stage: str, data: Path, adapter: Path | None, rl_steps: int, out: Path) -> list[str]:
    if stage == "sft":
        return ["--stage", "sft", "--model", "smollm2-135m", "--tasks", str(data), "--lr", "5e-4", "--epochs", "1",
                "--micro-batch", "4", "--out", str(out)]
    if adapter is None:
        raise SystemExit("the rl stage needs --adapter (an SFT adapter, e.g. RECIPE/sft/adapter)")
    return ["--stage", "rl", "--model", "smollm2-135m", "--init-adapter", str(adapter), "--algorithm", "reinforce",
            "--group-size", "4", "--prompts-per-step", "4", "--steps", str(rl_steps), "--lr", "2e-4",
            "--kl-coef", "0", "--temperature", "1.0", "--concurrency", "8", "--max-turns", "4",
            "--max-tool-calls", "3", "--max-new-tokens", "48", "--checkpoint-every", "1000", "--out", str(out),
            # every group is trained, so each step's update runs on all 16 trajectories (the filters would
            # drop the groups a weak adapter scores all-equal, and a step without an update measures nothing)
            "--filter-low", "0", "--filter-high", "1", "--filter-zero-variance", "false", "--drop-void-turns", "false"]


def run_one(argv: list[str], log: Path) -> dict:
    """Run one stage in a child and measure it alone (``wait4`` gives that child's own peak RSS)."""
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "research_agent.train", *argv],
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"stage failed ({proc.returncode}): {log.read_text()[-2000:]}")
    return {"peak_rss_gb": usage.ru_maxrss / 2**20, "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-data", type=Path, required=True, help="the recipe's sft.jsonl")
    ap.add_argument("--adapter", type=Path, help="an SFT adapter for the rl stage")
    ap.add_argument("--demos", type=int, default=24, help="demonstrations of the SFT stage (first N)")
    ap.add_argument("--rl-steps", type=int, default=2)
    ap.add_argument("--stages", default="sft,rl")
    ap.add_argument("--settings", default="default,nogc", help=f"comma list of {', '.join(SETTINGS)}")
    add_raw_flags(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ra-bench-mem-") as tmp:
        data = Path(tmp) / "sft.jsonl"
        lines = args.sft_data.read_text(encoding="utf-8").splitlines()[: args.demos]
        data.write_text("\n".join(lines) + "\n", encoding="utf-8")
        lengths = sorted(len(json.loads(line)["input_ids"]) for line in lines)
        print(f"SFT data: {len(lines)} demonstrations, {lengths[0]}-{lengths[-1]} tokens "
              f"(median {lengths[len(lengths) // 2]})", flush=True)
        results = {}
        for stage in args.stages.split(","):
            for setting in args.settings.split(","):
                out = Path(tmp) / f"{stage}-{setting}"
                argv = stage_argv(stage, data, args.adapter, args.rl_steps, out) + SETTINGS[setting]
                r = run_one(argv, Path(tmp) / f"{stage}-{setting}.log")
                results[(stage, setting)] = r
                print(f"{stage:>3} {setting:>7}: peak RSS {r['peak_rss_gb']:.2f} GB, {r['wall_s']:.0f} s wall",
                      flush=True)
        for stage in args.stages.split(","):
            ref = results.get((stage, "nogc"))
            for setting in args.settings.split(","):
                if ref and setting != "nogc":
                    r = results[(stage, setting)]
                    print(f"{stage} {setting} vs nogc: {r['peak_rss_gb'] / ref['peak_rss_gb']:.2f}x memory, "
                          f"{r['wall_s'] / ref['wall_s']:.2f}x time (goal <= 4 GB: "
                          f"{'met' if r['peak_rss_gb'] <= 4 else 'missed'})")
    write_raw("memory", args, {"demonstrations": len(lines), "lengths": lengths,
                               "results": [{"stage": st, "setting": se, **r} for (st, se), r in results.items()]})


if __name__ == "__main__":
    main()
