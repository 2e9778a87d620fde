"""Benchmark one RL optimizer step (ours) against TRL's GRPOTrainer on identical work, in one run.

    python bench/train_step.py [--steps 3] [--rounds 1] [--new-tokens 64] [--model smollm2-135m]
                               [--threads T] [--sides ours,trl] [--verbose]

Work per step, the same on both sides: smollm2-135m with a fresh LoRA adapter (r=16, α=32, dropout
0.05, q_proj/v_proj), 2 chat prompts × G=4 samples at temperature 0.7 (top_k 0, top_p 1), up to
``--new-tokens`` new tokens, single turn, a trivial verifiable reward (1 if the completion contains
the gold word), GRPO group advantages, KL 0.05 to the base model (the adapter disabled), AdamW at
lr 5e-6, one forward/backward over all 8 sequences, grad-norm clip 1.0.

- ours:  ``LocalPolicy.generate`` (one batch of 8) → ``Trajectory`` records → ``group_advantages``
         (grpo) → ``rl.policy_update`` with ``TrainConfig(compute={"micro_batch": 8})``;
- TRL:   ``GRPOTrainer`` (CPU, per_device_train_batch_size=8, num_generations=4,
         steps_per_generation=1 so one step is one generation of 8, beta=0.05), timed per step by a
         ``TrainerCallback`` (on_step_begin → on_step_end, which spans generation and update).

Each side runs in its own subprocess, so peak RSS (``ru_maxrss``) is its own.  Seconds per step is
the mean over the steps after the first (the first includes one-time warm-up); with ``--steps 1``
it is the first step.  The issue's goal: ours ≤ 0.5 × TRL's seconds per step.

The machine is shared and noisy (the same update measured 1.9 s and 2.7 s half an hour apart), so
``--rounds R`` runs the sides R times, alternating which goes first, and reports each round's ratio
and their median: a slow spell then hits both sides of a round rather than one side of the
comparison.  The raw JSON (every step of both sides in every round) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

PROMPTS = [
    ("What is the capital of France? Answer with one word.", "Paris"),
    ("What is the capital of Italy? Answer with one word.", "Rome"),
]
GROUP = 4
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
LR, BETA, TEMPERATURE = 5e-6, 0.05, 0.7
RESULT = "RESULT "


def contains_gold(text: str, gold: str) -> float:
    return 1.0 if gold.lower() in text.lower() else 0.0


def rss_mb() -> float:
    """Current resident set size in MB (from /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ---- the two sides, each run in its own process -------------------------------------------------
def run_ours(args) -> dict:
    import random

    import torch

    from research_agent.inference.policy import LocalPolicy
    from research_agent.train.algorithms import group_advantages
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import policy_update, setup_lora
    from research_agent.trajectory import Trajectory

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    cfg = TrainConfig(model=args.model, lora={"r": LORA["r"], "alpha": LORA["lora_alpha"],
                                              "dropout": LORA["lora_dropout"], "targets": list(LORA["target_modules"])},
                      lr=LR, kl_coef=BETA, compute={"micro_batch": len(PROMPTS) * GROUP}, group_size=GROUP,
                      algorithm="grpo", agent={"temperature": TEMPERATURE, "max_new_tokens": args.new_tokens},
                      max_grad_norm=1.0, seed=args.seed)
    model, tok = setup_lora(cfg, progress=False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    policy = LocalPolicy(model, tok, name=f"{args.model}+lora")
    prompt_ids = []
    for q, _ in PROMPTS:
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        prompt_ids.append(list(ids["input_ids"] if hasattr(ids, "input_ids") else ids))
    load_rss = rss_mb()
    times, gen_tokens, rewards_seen, gen_times = [], [], [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        torch.manual_seed(args.seed * 100_003 + step)
        batch = [(pi, q, gold) for pi, (q, gold) in zip(prompt_ids, PROMPTS, strict=True) for _ in range(GROUP)]
        gens = policy.generate([b[0] for b in batch], max_new_tokens=args.new_tokens, temperature=cfg.agent.temperature)
        gen_times.append(time.perf_counter() - t0)
        trajs = [Trajectory(question=q, gold={"answers": [gold]}, prompt_ids=list(pi), token_ids=list(g.token_ids),
                            token_mask=[1] * len(g.token_ids), logprobs=list(g.logprobs))
                 for (pi, q, gold), g in zip(batch, gens, strict=True)]
        rewards = [contains_gold(g.text, gold) for (_, _, gold), g in zip(batch, gens, strict=True)]
        adv = group_advantages(rewards, GROUP, "grpo")
        chosen = [i for i, t in enumerate(trajs) if t.token_ids]
        model.train()
        policy_update(model, opt, params, trajs, adv, chosen, cfg, tok.pad_token_id)
        model.eval()
        times.append(time.perf_counter() - t0)
        gen_tokens.append(sum(len(g.token_ids) for g in gens))
        rewards_seen.append(sum(rewards) / len(rewards))
    return {"side": "ours", "times": times, "gen_times": gen_times, "gen_tokens": gen_tokens, "reward": rewards_seen,
            "load_rss_mb": load_rss, "peak_rss_mb": peak_rss_mb(), "torch_threads": torch.get_num_threads()}


def run_trl(args) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from research_agent.inference.models import load_model

    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, progress=False)
    load_rss = rss_mb()

    class Timer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.lengths: list[float] = []
            self.rewards: list[float] = []
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(float(logs["completions/mean_length"]))
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))

    def gold_reward(completions, gold, **kw):
        out = []
        for c, g in zip(completions, gold, strict=True):
            text = c[-1]["content"] if isinstance(c, list) else str(c)
            out.append(contains_gold(text, g))
        return out

    rows = [{"prompt": [{"role": "user", "content": q}], "gold": g} for q, g in PROMPTS] * max(1, args.steps)
    timer = Timer()
    with tempfile.TemporaryDirectory(prefix="bench-train-step-trl-") as tmp:
        gcfg = GRPOConfig(output_dir=tmp, use_cpu=True, per_device_train_batch_size=len(PROMPTS) * GROUP,
                          num_generations=GROUP, steps_per_generation=1, max_completion_length=args.new_tokens,
                          temperature=TEMPERATURE, top_p=1.0, top_k=0, learning_rate=LR, beta=BETA,
                          max_grad_norm=1.0, logging_steps=1, report_to=[], max_steps=args.steps, bf16=False,
                          save_strategy="no", seed=args.seed, shuffle_dataset=False, disable_tqdm=True)
        trainer = GRPOTrainer(model=model, reward_funcs=[gold_reward], args=gcfg,
                              train_dataset=Dataset.from_list(rows), processing_class=tok,
                              peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA), callbacks=[timer])
        trainer.train()
    group = len(PROMPTS) * GROUP
    return {"side": "trl", "trl_version": trl.__version__, "times": timer.times,
            "gen_tokens": [m * group for m in timer.lengths], "reward": timer.rewards,
            "load_rss_mb": load_rss, "peak_rss_mb": peak_rss_mb(), "torch_threads": torch.get_num_threads()}


# ---- the driver ---------------------------------------------------------------------------------
def child(args) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    res = run_ours(args) if args.side == "ours" else run_trl(args)
    print(RESULT + json.dumps(res), flush=True)
    return 0


def spawn(side: str, args) -> dict | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--steps", str(args.steps),
           "--new-tokens", str(args.new_tokens), "--model", args.model, "--seed", str(args.seed),
           "--threads", str(args.threads)]
    print(f"[{side}] running {args.steps} step(s) in a subprocess ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if args.verbose else subprocess.PIPE,
                          text=True, timeout=args.timeout or None)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    print(f"[{side}] failed (exit {proc.returncode}); last output:", file=sys.stderr)
    print((proc.stdout or "")[-2000:], (proc.stderr or "")[-4000:], sep="\n", file=sys.stderr)
    return None


def per_step(times: list[float]) -> float:
    rest = times[1:] if len(times) > 1 else times
    return sum(rest) / len(rest) if rest else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per side (mean over steps 2..N)")
    p.add_argument("--rounds", type=int, default=1, help="run the sides alternately this many times; "
                   "the verdict uses the median of the rounds' ratios")
    p.add_argument("--new-tokens", type=int, default=64, help="max new tokens per completion")
    p.add_argument("--model", default="smollm2-135m", help="named offline model, local path or hub id")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads in each side (0: torch's default)")
    p.add_argument("--sides", default="ours,trl", help="which sides to run, comma separated")
    p.add_argument("--timeout", type=float, default=0, help="seconds allowed per side (0: no limit)")
    p.add_argument("--verbose", action="store_true", help="show the sides' stderr (TRL's logs)")
    add_raw_flags(p)
    p.add_argument("--side", choices=("ours", "trl"), help=argparse.SUPPRESS)  # internal: run one side
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        raise SystemExit("--steps and --rounds must be at least 1")
    if args.side:
        return child(args)

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for side in sides:
        if side not in ("ours", "trl"):
            raise SystemExit(f"unknown side {side!r}; use ours and/or trl")
    rounds = []
    for i in range(args.rounds):  # alternate which side goes first: a slow spell falls on both
        order = sides if i % 2 == 0 else sides[::-1]
        rounds.append({side: spawn(side, args) for side in order})
    results = {side: rounds[-1][side] for side in sides}

    span = f"steps 2..{args.steps}" if args.steps > 1 else "step 1 only"
    threads = next((r["torch_threads"] for r in results.values() if r), "?")
    print(f"\nTrain step: {args.model} + LoRA r{LORA['r']} ({','.join(LORA['target_modules'])}), "
          f"{len(PROMPTS)} prompts x G={GROUP}, {args.new_tokens} new tokens, T={TEMPERATURE}, lr {LR}, "
          f"KL {BETA}, {args.steps} step(s), torch threads {threads}")
    print(f"  {'':<28} {'s/step':>8} {'first s':>8} {'gen tok/step':>13} {'RSS load MB':>12} {'peak RSS MB':>12}")
    names = {"ours": "ours (rl.policy_update)", "trl": "TRL GRPOTrainer"}
    for side, r in results.items():
        if r is None:
            print(f"  {names[side]:<28} failed (rerun with --verbose)")
            continue
        name = names[side] + (f" {r['trl_version']}" if side == "trl" else "")
        tok = sum(r["gen_tokens"]) / len(r["gen_tokens"]) if r["gen_tokens"] else float("nan")
        first = r["times"][0] if r["times"] else float("nan")
        print(f"  {name:<28} {per_step(r['times']):>8.2f} {first:>8.2f} {tok:>13.1f} "
              f"{r['load_rss_mb']:>12.0f} {r['peak_rss_mb']:>12.0f}")
    print(f"  (s/step: mean of {span})")
    if results.get("ours") and results["ours"].get("gen_times"):
        g = per_step(results["ours"]["gen_times"])
        print(f"  ours split: generation {g:.2f} s/step, update (advantages, forward/backward, step) "
              f"{per_step(results['ours']['times']) - g:.2f} s/step")
    if len(rounds) > 1:
        print(f"  (the table is round {len(rounds)} of {len(rounds)})")
    ratios = []
    for i, rnd in enumerate(rounds, 1):
        ours, ref = rnd.get("ours"), rnd.get("trl")
        if ours and ref:
            ratios.append(per_step(ours["times"]) / per_step(ref["times"]))
            if len(rounds) > 1:
                print(f"  round {i}: ours {per_step(ours['times']):.2f} s/step, TRL {per_step(ref['times']):.2f} s/step, "
                      f"ratio {ratios[-1]:.2f}x")
    if ratios:
        ratio = statistics.median(ratios)
        verdict = "meets" if ratio <= 0.5 else "misses"
        label = "median of rounds" if len(ratios) > 1 else "seconds per step"
        print(f"\n  ours / TRL {label}: {ratio:.2f}x  ({verdict} the goal of <= 0.50x)")
        ours, ref = results.get("ours"), results.get("trl")
        if ours and ref:
            print(f"  ours / TRL peak RSS:         {ours['peak_rss_mb'] / ref['peak_rss_mb']:.2f}x")
    write_raw("train_step", args, {"prompts": len(PROMPTS), "group": GROUP, "lora": LORA, "lr": LR, "kl": BETA,
                                   "temperature": TEMPERATURE, "rounds": rounds}, variant=args.model)
    return 0 if all(all(r.values()) for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
