"""One config dataclass for training; each field's help is its documentation.

Defaults follow the seeds: group size 4, lr 5e-6 (RL), KL 0.05, LoRA r=16 α=32 dropout 0.05 on
q_proj/v_proj, temperature 0.7, max 5 turns, fast template, F1 + action penalty reward, and
REINFORCE with a batch-mean baseline (seed 003: the most stable and cheapest of REINFORCE / PPO /
GRPO).  A TOML file and CLI flags map onto the same fields.
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar


def _f(default, help: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    stage: str = _f("rl", "rl (policy gradient on rollouts) or sft (cold start on synthesized trajectories)")
    model: str = _f("smollm2-135m", "named offline model, local path or hub id")
    init_adapter: str | None = _f(None, "start from this LoRA adapter (e.g. the SFT result) instead of a fresh one")
    tasks: str = _f("", "JSONL of {id, question, answers, ...} (rl) or SFT export (sft); empty = shipped Factbook set")
    split: str = _f("train", "use only task lines whose 'split' is this (empty: all lines)")
    corpus: str | None = _f(None, "corpus index directory (default: the embedded corpus)")
    retrieval_url: str | None = _f(None, "use a retrieval service (python -m corpus serve) instead of a local index")
    out: str = _f("runs/train", "run directory: config, metrics.jsonl, plots, checkpoints/")
    algorithm: str = _f("reinforce", "reinforce (batch-mean baseline; seed 003's most stable), grpo "
                        "(group-normalized advantages), rloo (leave-one-out baseline)")
    group_size: int = _f(4, "trajectories per prompt (G)")
    prompts_per_step: int = _f(2, "prompts per optimizer step; the batch is prompts_per_step × group_size")
    steps: int = _f(30, "optimizer steps (rl)")
    epochs: int = _f(2, "passes over the SFT data (sft)")
    lr: float = _f(5e-6, "learning rate (seed: 5e-6 for RL; SFT with LoRA usually wants ~1e-4)")
    kl_coef: float = _f(0.05, "token-level KL penalty to the reference (the base model: adapter disabled)")
    clip_ratio: float = _f(0.2, "PPO-style ratio clip, used when ppo_epochs > 1 reuses a batch")
    ppo_epochs: int = _f(1, "optimizer passes over one batch of rollouts (1 = on-policy, no clipping needed)")
    micro_batch: int = _f(2, "trajectories per forward/backward (memory vs speed)")
    max_grad_norm: float = _f(1.0, "gradient clipping")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    lora_dropout: float = _f(0.05, "LoRA dropout")
    lora_targets: list[str] = _f(["q_proj", "v_proj"], "modules that get LoRA adapters")
    template: str = _f("fast", "prompt template: fast (default, seed 003) or slow")
    temperature: float = _f(0.7, "sampling temperature for rollouts (eval uses greedy)")
    max_turns: int = _f(5, "policy turns per rollout")
    max_tool_calls: int = _f(3, "tool calls per rollout; then the model is told to answer")
    max_new_tokens: int = _f(48, "tokens per turn")
    max_total_tokens: int = _f(1024, "prompt + trajectory token cap (full context)")
    context: str = _f("full", "rollout context: full (the growing transcript) or managed (Tongyi DeepResearch: each "
                      "step sees the question, the model's <notes> and the last result, and is trained as its own "
                      "sequence); sft renders each record in the mode it was recorded in")
    context_tokens: int = _f(1024, "managed context: the most tokens one step holds, prompt plus turn (also the "
                             "window managed SFT records are rendered into)")
    notes_tokens: int = _f(128, "managed context: the model's running notes are cut to this many tokens")
    reward: str = _f("f1_penalty", "reward spec: a name from rewards.REWARDS or 'name:weight,name:weight'")
    pass_threshold: float = _f(0.8, "F1 at or above which a trajectory counts as correct (pass rate, filtering)")
    filter_low: float = _f(0.2, "drop groups whose accuracy is below this (Agent RL Scaling Law); <=0 disables")
    filter_high: float = _f(0.8, "drop groups whose accuracy is above this; >=1 disables")
    filter_zero_variance: bool = _f(True, "drop groups whose rewards are all equal (no signal)")
    drop_void_turns: bool = _f(True, "exclude trajectories with a turn that was neither a valid action nor an "
                                     "answer (SimpleTIR)")
    reward_fallback: float = _f(0.0, "reward given when a reward function raises (logged once per error type)")
    checkpoint_every: int = _f(5, "save a checkpoint every N steps")
    keep_checkpoints: int = _f(3, "how many checkpoints to keep")
    seed: int = _f(0, "random seed (data order, sampling)")
    concurrency: int = _f(8, "trajectories generated concurrently through the batched policy")
    kl_alarm: float = _f(1.0, "stop with an alarm when the mean KL exceeds this")

    # fields that may change on --resume without changing what the run computes
    RESUMABLE: ClassVar[tuple[str, ...]] = ("steps", "out", "concurrency", "checkpoint_every",
                                            "keep_checkpoints", "kl_alarm")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def diff(self, other: dict[str, Any]) -> list[str]:
        mine = self.to_dict()
        return sorted(k for k in mine if k not in self.RESUMABLE and k in other and other[k] != mine[k])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research_agent.train",
                                description="LoRA RL (REINFORCE / GRPO / RLOO) and SFT for research agents")
    p.add_argument("--config", help="TOML file with any of the fields below")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if isinstance(default, bool):
            kind = lambda s: s.lower() in ("1", "true", "yes", "on")  # noqa: E731
        elif isinstance(default, list):
            kind = lambda s: [x for x in s.split(",") if x]  # noqa: E731
        elif default is None:
            kind = str
        else:
            kind = type(default)
        p.add_argument(flag, type=kind, default=None, help=f"{f.metadata['help']} (default: {default})")
    return p


def load_config(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """CLI flags override a TOML file (``--config``), which overrides the defaults."""
    args = _parser().parse_args(argv)
    values: dict[str, Any] = {}
    if args.config:
        with open(args.config, "rb") as fh:
            values.update(tomllib.load(fh))
    for f in fields(TrainConfig):
        v = getattr(args, f.name)
        if v is not None:
            values[f.name] = v
    unknown = set(values) - {f.name for f in fields(TrainConfig)}
    if unknown:
        raise SystemExit(f"unknown config fields: {', '.join(sorted(unknown))}")
    cfg = TrainConfig(**values)
    if cfg.stage not in ("rl", "sft"):
        raise SystemExit(f"--stage must be rl or sft, not {cfg.stage!r}")
    if cfg.algorithm not in ("reinforce", "grpo", "rloo"):
        raise SystemExit(f"--algorithm must be reinforce, grpo or rloo, not {cfg.algorithm!r}")
    if cfg.context not in ("full", "managed"):
        raise SystemExit(f"--context must be full or managed, not {cfg.context!r}")
    return cfg, args
