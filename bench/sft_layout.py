"""Benchmark the SFT step's layout: padding-light passes against one padded pass, on the same
demonstrations and the same weights, in one run.

    python bench/sft_layout.py [--model smollm2-135m] [--tasks SFT.jsonl[.gz]] [--steps 4]
                               [--micro-batch 4] [--repeats 2] [--threads T]

The examples are a real ``synth sft-export`` file (default: the one research-qwen-v2 trained on,
committed under artifacts/), rendered with the student's tokenizer as ``train --stage sft`` renders
them, and the steps are the trainer's first ``--steps`` steps in its own order.  Each step runs
``sft._step`` twice per round, in turn (the first rotating), with SGD at lr 0 so every repeat sees
the same weights:

- one padded pass (the reference, the trainer before this layout): the step's rows padded to the
  longest;
- padding-light passes (the trainer's layout): rows of like length together, a long one alone
  (``batching.chunk_lengths``).

Both give the same loss and gradients (tests/train/test_train_loss_chunks.py).  The figure is the
median over rounds of the ratio of the two sides' summed step times, with positions fed beside it.
The machine is shared and noisy: read the figures as ratios within one run.  The raw JSON goes to
docs/results/bench/.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

DEFAULT_TASKS = ROOT / "artifacts" / "research-qwen-v2" / "stages" / "sft-export" / "files" / "sft.jsonl.gz"


def _plain_jsonl(path: Path, tmp: str) -> str:
    """The export as a plain JSONL path (the committed one is gzipped)."""
    if path.suffix != ".gz":
        return str(path)
    out = Path(tmp) / path.stem
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return str(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", default=str(DEFAULT_TASKS), help="an SFT export (JSONL, or JSONL.gz)")
    p.add_argument("--steps", type=int, default=4, help="the trainer's first N steps")
    p.add_argument("--micro-batch", type=int, default=4, help="examples per step (the recipe's 4)")
    p.add_argument("--max-total-tokens", type=int, default=3072, help="the recipe's context budget")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    add_raw_flags(p)
    args = p.parse_args(argv)
    if not Path(args.tasks).exists():
        p.error(f"no SFT export at {args.tasks} (make one with `python -m synth sft-export`)")

    import random

    import torch

    from research_agent.tasks import load_sft_records, render_examples
    from research_agent.train.batching import PASS_COST, plan_cost, plan_update
    from research_agent.train.config import TrainConfig
    from research_agent.train.distributed import Ranks
    from research_agent.train.rl import setup_lora
    from research_agent.train.sft import _step

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-sft-layout-") as tmp:
        cfg = TrainConfig(stage="sft", model=args.model, tasks=_plain_jsonl(Path(args.tasks), tmp),
                          agent={"max_total_tokens": args.max_total_tokens},
                          compute={"micro_batch": args.micro_batch})
        model, tok = setup_lora(cfg, progress=False)
        examples = [e for r in load_sft_records(cfg.tasks) for e in render_examples(tok, r, cfg.agent)]
    order = list(range(len(examples)))
    random.Random(cfg.seed).shuffle(order)  # the trainer's epoch-0 order
    steps = [order[s * args.micro_batch: (s + 1) * args.micro_batch] for s in range(args.steps)]
    steps = [s for s in steps if s]
    layouts = {"one padded pass (reference)": 1e9, "padding-light passes": PASS_COST}

    def fed(rows: list[int], cost: float) -> tuple[int, int]:  # (passes, positions) of one step, as _step lays it
        units = [examples[i] for i in rows]
        return plan_cost(plan_update(units, len(rows), share_prefix=False, pass_cost=cost), units)

    plans = {name: [fed(s, cost) for s in steps] for name, cost in layouts.items()}
    opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.0)
    model.train()
    times: dict[str, list[float]] = {name: [] for name in layouts}
    for r in range(max(1, args.repeats)):
        names = list(layouts)
        for name in names[r % 2:] + names[: r % 2]:
            t = time.perf_counter()
            for rows in steps:
                _step(model, opt, examples, rows, tok.pad_token_id, "cpu", Ranks(), cfg, pass_cost=layouts[name])
            times[name].append(time.perf_counter() - t)
            print(f"round {r + 1} {name}: {times[name][-1]:.1f} s", file=sys.stderr)
    real = sum(len(examples[i][0]) for s in steps for i in s)
    print(f"\nSFT step layout: {args.model} + LoRA r{cfg.lora.r}, {len(steps)} steps of {args.micro_batch} "
          f"examples ({real} tokens; the export's {len(examples)} examples run "
          f"{min(len(e[0]) for e in examples)}-{max(len(e[0]) for e in examples)} tokens), "
          f"torch threads {torch.get_num_threads()}")
    print(f"  {'layout':<28} {'s/step (median)':>15} {'passes':>7} {'positions':>10}  rounds (s for all steps)")
    for name in layouts:
        passes = sum(n for n, _ in plans[name])
        positions = sum(n for _, n in plans[name])
        print(f"  {name:<28} {statistics.median(times[name]) / len(steps):>15.2f} {passes:>7} {positions:>10}  "
              f"{' / '.join(f'{x:.1f}' for x in times[name])}")
    ref, ours = list(layouts)
    ratios = [a / b for a, b in zip(times[ours], times[ref], strict=True)]
    pos = sum(n for _, n in plans[ours]) / sum(n for _, n in plans[ref])
    print(f"\n  padding-light / one padded pass: {statistics.median(ratios):.2f}x time (median of the rounds' "
          f"ratios: {' / '.join(f'{x:.2f}' for x in ratios)}), {pos:.2f}x positions")
    write_raw("sft_layout", args, {
        "steps": len(steps), "examples": len(examples), "tokens": real,
        "layouts": {name: {"passes": sum(n for n, _ in plans[name]), "positions": sum(n for _, n in plans[name]),
                           "seconds": times[name]} for name in layouts}}, variant=args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
