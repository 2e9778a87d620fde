"""Benchmark the RL update's layout on real agent trajectories: shared prompts and padding-light chunks
against plain padded micro-batches, on the same trajectories, in one run.

    python bench/update_layout.py [--model smollm2-135m] [--prompts 4] [--group 4] [--micro-batch 2]
                                  [--max-turns 4] [--repeats 2] [--kl 0.05] [--threads T]

First one RL step's rollouts: ``--prompts`` Factbook questions from the shipped training set × G
samples through the research agent (temperature 1.0, the default corpus), exactly as ``train_rl``
collects them.  Then ``rl.policy_update`` on those trajectories with three layouts
(``research_agent/train/batching.py``), in ``--repeats`` rounds of the three in turn (the figure is
the median of the rounds' ratios, with their range; the optimizer is SGD at lr 0, so every repeat
sees the same weights):

- plain (the reference): whole sequences, the fewest micro-batches of ``--micro-batch`` rows;
- chunks: whole sequences, chunks chosen by the cost model (padding vs passes);
- shared: each group's prompt once per block, suffix chunks on its keys/values (the default).

All three give the same update (the test suite checks that); only time and positions fed differ.
The machine is shared and noisy: read the figures as ratios within one run.  The raw JSON (every
round's seconds for every layout) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompts", type=int, default=4, help="questions per step")
    p.add_argument("--group", type=int, default=4, help="samples per question (G)")
    p.add_argument("--micro-batch", type=int, default=2, help="rows per pass (the trainer's default)")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--kl", type=float, default=0.05, help="KL coefficient (0 skips the reference passes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    add_raw_flags(p)
    args = p.parse_args(argv)

    import torch

    from research_agent.tasks import get_task_type
    from research_agent.train import batching
    from research_agent.train.algorithms import group_advantages
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import policy_update, setup_lora

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(model=args.model, group_size=args.group, prompts_per_step=args.prompts,
                      agent={"max_turns": args.max_turns, "temperature": 1.0}, kl_coef=args.kl, seed=args.seed,
                      compute={"micro_batch": args.micro_batch, "concurrency": args.prompts * args.group})
    torch.manual_seed(args.seed)
    model, tok = setup_lora(cfg, progress=False)
    from research_agent.inference.policy import LocalPolicy

    tasks = get_task_type(cfg.task_type)
    items = tasks.load_tasks(cfg)[: args.prompts]
    batch = [it for task in items for it in tasks.group_items(task, 0, cfg)]
    t0 = time.perf_counter()
    trajs = tasks.run_rollouts(batch, LocalPolicy(model, tok), tasks.make_browser(cfg), cfg)
    print(f"rollouts: {len(trajs)} trajectories in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    adv = group_advantages([float(len(t.token_ids) % 3) for t in trajs], args.group, "grpo")  # any non-zero
    chosen = [i for i, t in enumerate(trajs) if any(t.token_mask)]
    units = [seq for i in chosen for seq in trajs[i].sequences()]
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)
    layouts = {"plain (reference)": dict(share_prefix=False, pass_cost=1e9),
               "chunks": dict(share_prefix=False, pass_cost=batching.PASS_COST),
               "shared + chunks": dict(share_prefix=True, pass_cost=batching.PASS_COST)}
    model.train()
    plans = {name: batching.plan_cost(batching.plan_update(units, args.micro_batch, **layout), units)
             for name, layout in layouts.items()}
    times: dict[str, list[float]] = {name: [] for name in layouts}
    for r in range(max(1, args.repeats)):  # rounds of the three layouts in turn, the first one rotating
        names = list(layouts)
        for name in names[r % 3:] + names[: r % 3]:
            t = time.perf_counter()
            policy_update(model, opt, params, trajs, adv, chosen, cfg, tok.pad_token_id, layout=layouts[name])
            times[name].append(time.perf_counter() - t)
    rows = [(name, statistics.median(times[name]), *plans[name]) for name in layouts]
    tokens = sum(sum(m) for _, m in units)
    whole = sum(len(ids) for ids, _ in units)
    print(f"\nUpdate layout: {args.model} + LoRA r{cfg.lora.r}, {args.prompts} questions x G={args.group}, "
          f"{len(units)} sequences ({whole} tokens, {tokens} model tokens), micro-batch {args.micro_batch}, "
          f"KL {args.kl}, torch threads {torch.get_num_threads()}")
    print(f"  {'layout':<20} {'s/update (median)':>17} {'passes':>7} {'positions':>10}  rounds")
    for name, sec, passes, positions in rows:
        print(f"  {name:<20} {sec:>17.2f} {passes:>7} {positions:>10}  {' / '.join(f'{x:.2f}' for x in times[name])}")
    names = list(layouts)
    ratios = [a / b for a, b in zip(times[names[-1]], times[names[0]], strict=True)]
    print(f"\n  shared + chunks / plain: {statistics.median(ratios):.2f}x time (median of the rounds' ratios: "
          f"{' / '.join(f'{x:.2f}' for x in ratios)}), {rows[-1][3] / rows[0][3]:.2f}x positions")
    write_raw("update_layout", args, {
        "sequences": len(units), "tokens": whole, "model_tokens": tokens,
        "layouts": {name: {"passes": plans[name][0], "positions": plans[name][1], "seconds": times[name]}
                    for name in layouts}}, variant=args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
