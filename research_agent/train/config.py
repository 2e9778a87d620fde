"""One config dataclass for training; each field's help is its documentation.

Defaults follow the seeds: group size 4, lr 5e-6 (RL), KL 0.05, LoRA r=16 α=32 dropout 0.05 on
q_proj/v_proj, temperature 0.7, max 5 turns, fast template, F1 + action penalty reward, and
REINFORCE with a batch-mean baseline (seed 003: the most stable and cheapest of REINFORCE / PPO /
GRPO).  A TOML file and CLI flags map onto the same fields.

Code tasks are a second task type of the same trainer (``task_type = "code"``), not a second
trainer: only the task source, the rollout graph, the default reward and what counts as correct
differ (``research_agent.tasks``).  Fields left unset (None) whose sensible value differs by task type —
reward, tokens per turn and in total, tool calls — take that task type's default, and config.json
records the resolved value.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from corpus.local import MODES as RETRIEVERS
from research_agent.configs import ConfigError, add_flags, build, flag_values, load_file
from research_agent.inference.devices import DeviceError, check_device_spec, check_dtype_spec

from .curriculum import CURRICULA
from .tracking import TRACKERS

__all__ = ["ConfigError", "TrainConfig", "load_config"]


def _f(default, help: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    stage: str = _f("rl", "rl (policy gradient on rollouts) or sft (cold start: research on synthesized "
                "trajectories, code on demonstrations replayed from the tasks' reference solutions)")
    task_type: str = _f("research", "research (questions answered with search/open/find) or code (programming "
                        "tasks solved with search docs/execute/submit, checked by their tests)")
    model: str = _f("smollm2-135m", "named offline model, local path or hub id")
    init_adapter: str | None = _f(None, "start from this LoRA adapter (e.g. the SFT result) instead of a fresh one")
    tasks: str = _f("", "research: JSONL of {id, question, answers, ...} (rl) or SFT export (sft), empty = "
                    "shipped Factbook set; code: a task spec (dataframebench:train|val|test, humaneval, "
                    "kodcode:PATH.jsonl, bigcodebench:PATH.jsonl), empty = dataframebench:train")
    split: str = _f("train", "research: use only task lines whose 'split' is this (empty: all lines); code tasks "
                    "name their split in --tasks")
    corpus: str | None = _f(None, "corpus index directory; research default: the embedded corpus, code default: "
                            "the cached API-docs corpus (built from the installed libraries on first use)")
    retrieval_url: str | None = _f(None, "use a retrieval service (python -m corpus serve) instead of a local index "
                                   "(for code: one serving the API-docs corpus)")
    retriever: str = _f("hybrid", "search over a local corpus: dense, bm25 or hybrid (as eval's --retriever; code: "
                        "bm25 builds the API docs in seconds instead of embedding them for ~35 min on a CPU)")
    code_mode: str = _f("multi-tool", "code: multi-tool (search docs + execute + submit; the model learns when to "
                        "use which), code-only (execute + submit) or no-tools (one shot)")
    test_feedback: bool = _f(True, "code: a failed submission is answered with the failing tests and the episode goes "
                             "on (the seed's run-tests tool; the last submission is scored); false: a "
                             "submission ends the task, as in the code runs before this became the default")
    demo_tasks: int = _f(0, "code SFT: demonstrate the first N tasks (0: all); each demonstration replays the "
                         "task's reference solution through the agent (search docs, execute, submit)")
    demo_recovery: float = _f(0.5, "code SFT: share of the demonstrations that first run a broken version of the "
                              "solution (cut off mid-line, or missing its import), read the error and fix it")
    docs_modules: list[str] = _f([], "code: modules documented when the API-docs corpus is first built "
                                 "(empty: the default stdlib + data-science set)")
    out: str = _f("runs/train", "run directory: config, metrics.jsonl, plots, checkpoints/")
    algorithm: str = _f("reinforce", "reinforce (batch-mean baseline; seed 003's most stable), grpo "
                        "(group-normalized advantages), rloo (leave-one-out baseline), gigpo (GRPO plus "
                        "step-level advantages among steps that start from the same observation)")
    gigpo_gamma: float = _f(0.95, "gigpo: discount of the final reward per later step (step returns)")
    gigpo_omega: float = _f(1.0, "gigpo: weight of the step-level advantage added to the episode one")
    group_size: int = _f(4, "trajectories per prompt (G)")
    prompts_per_step: int = _f(2, "prompts per optimizer step; the batch is prompts_per_step × group_size")
    steps: int = _f(30, "optimizer steps (rl)")
    epochs: int = _f(2, "passes over the SFT data (sft)")
    lr: float = _f(5e-6, "learning rate (seed: 5e-6 for RL; SFT with LoRA usually wants ~1e-4)")
    kl_coef: float = _f(0.05, "token-level KL penalty to the reference (the base model: adapter disabled); 0 skips "
                        "the reference forward pass (faster; the logged KL is then 0)")
    clip_ratio: float = _f(0.2, "PPO-style ratio clip, used when ppo_epochs > 1 reuses a batch")
    ppo_epochs: int = _f(1, "optimizer passes over one batch of rollouts (1 = on-policy, no clipping needed)")
    micro_batch: int = _f(2, "most rows in one forward/backward pass of the update (memory vs speed)")
    share_prefix: bool = _f(True, "run a prompt shared by a group's trajectories once per update (same update, "
                                  "fewer positions)")
    gradient_checkpointing: bool | None = _f(None, "recompute each layer's activations in the backward instead of "
                                             "keeping them; unset: per pass, when keeping them would take over "
                                             "1.5 GB (estimated from the pass's tokens and the model's size): the "
                                             "recipe's SFT stage peaks at 2.8 GB instead of 7.8 GB for 24 % more "
                                             "time, its RL stage at 3.6 instead of 6.6 GB; a checkpointed RL update "
                                             "feeds whole sequences (a shared prompt needs the K/V cache "
                                             "checkpointed layers do not write); docs/benchmarks.md")
    max_grad_norm: float = _f(1.0, "gradient clipping")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    lora_dropout: float = _f(0.05, "LoRA dropout")
    lora_targets: list[str] = _f(["q_proj", "v_proj"], "modules that get LoRA adapters")
    template: str = _f("fast", "prompt template: fast (default, seed 003) or slow")
    temperature: float = _f(0.7, "sampling temperature for rollouts (eval uses greedy)")
    max_turns: int = _f(5, "policy turns per rollout")
    max_tool_calls: int | None = _f(None, "tool calls per rollout; then the model is told to answer (submit is never "
                                    "capped); unset: 3 research, 4 code")
    max_new_tokens: int | None = _f(None, "tokens per turn; unset: 48 research (fast template), 512 code (a whole "
                                    "function fits)")
    max_total_tokens: int | None = _f(None, "prompt + trajectory token cap; unset: 1024 research, 4096 code "
                                      "(DataFrameBench prompts run to ~800 tokens and must fit in half)")
    context: str = _f("full", "rollout context: full (the growing transcript) or managed (Tongyi DeepResearch: each "
                      "step sees the question, the model's <notes> and the last result, and is trained as its own "
                      "sequence); sft renders each record in the mode it was recorded in")
    context_tokens: int = _f(1024, "managed context: the most tokens one step holds, prompt plus turn (also the "
                             "window managed SFT records are rendered into)")
    notes_tokens: int = _f(128, "managed context: the model's running notes are cut to this many tokens")
    reward: str | None = _f(None, "reward spec: a name from rewards.REWARDS or 'name:weight,name:weight'; unset: "
                            "f1_penalty (research, seed 003) or code_shaped (code: the seed's shaping; code_torl "
                            "is ToRL's +1/-1/-0.5)")
    pass_threshold: float = _f(0.8, "research: F1 at or above which a trajectory counts as correct (pass rate, "
                               "filtering); a code trajectory is correct when its submission passes the tests")
    dynamic_sampling: int = _f(0, "extra rollout rounds per step (DAPO dynamic sampling): while fewer than "
                                  "prompts_per_step groups survived the filters, draw that many more prompts; "
                                  "0 trains on whatever survived the first round")
    filter_low: float = _f(0.2, "drop groups whose accuracy is below this (Agent RL Scaling Law); <=0 disables")
    filter_high: float = _f(0.8, "drop groups whose accuracy is above this; >=1 disables")
    filter_zero_variance: bool = _f(True, "drop groups whose rewards are all equal (no signal)")
    curriculum: str = _f("none", "task draw order: none (one seeded shuffle, in order) or learnability (draw task "
                         "kinds in proportion to the running chance that a group of that kind is learnable: pass "
                         "rate strictly between 0 and 1 and inside the filter bounds)")
    curriculum_key: str = _f("kind", "learnability curriculum: the task field (research) or attribute / meta entry "
                             "(code) that names a task's kind")
    curriculum_decay: float = _f(0.7, "learnability curriculum: the evidence of past rounds is multiplied by this "
                                 "every round, so the estimate follows the current policy")
    curriculum_floor: float = _f(0.05, "learnability curriculum: the least weight a kind keeps, so none is dropped "
                                 "for good")
    drop_void_turns: bool = _f(True, "exclude trajectories with a turn that was neither a valid action nor an "
                                     "answer (SimpleTIR)")
    reward_fallback: float = _f(0.0, "reward given when a reward function raises (logged once per error type)")
    checkpoint_every: int = _f(5, "save a checkpoint every N steps")
    keep_checkpoints: int = _f(3, "how many checkpoints to keep")
    seed: int = _f(0, "random seed (data order, sampling)")
    concurrency: int = _f(8, "trajectories generated concurrently through the batched policy")
    rollout_endpoint: str = _f("", "generate rollouts on this OpenAI-compatible server instead of in-process, in token "
                               "space (research-agent serve, or vLLM with --enable-lora); the trainer "
                               "publishes its adapter there after every step (docs/scaling.md)")
    report_to: str = _f("none", "also log every metrics row to none, tensorboard (OUT/tensorboard), trackio or wandb "
                        "(offline mode); the library is an optional extra")
    device: str = _f("auto", "where the policy trains and generates: auto (a CUDA GPU if torch sees one, else the "
                     "CPU), cpu, cuda or cuda:N")
    dtype: str = _f("auto", "base weights' precision: auto (bfloat16 on a GPU that has it, else float32), float32, "
                    "bfloat16 or float16; LoRA weights stay float32 (peft keeps trainable adapters in float32)")
    kl_alarm: float = _f(1.0, "stop with an alarm when the mean KL exceeds this")
    allow_unsafe_sandbox: bool = _f(False, "code: run rollouts even where the sandbox cannot contain model-written "
                                    "code (docs/security.md); without it such a level is refused before training")

    # fields that may change on --resume without changing what the run computes
    RESUMABLE: ClassVar[tuple[str, ...]] = ("steps", "out", "concurrency", "checkpoint_every",
                                            "keep_checkpoints", "kl_alarm", "micro_batch",
                                            "share_prefix", "gradient_checkpointing",  # cost only
                                            "allow_unsafe_sandbox", "device", "report_to",
                                            "rollout_endpoint")

    def __post_init__(self) -> None:
        from research_agent.code.env import MODES
        from research_agent.tasks import TASK_TYPES

        if self.stage not in ("rl", "sft"):
            raise ConfigError(f"stage must be rl or sft, not {self.stage!r}")
        if self.algorithm not in ("reinforce", "grpo", "rloo", "gigpo"):
            raise ConfigError(f"algorithm must be reinforce, grpo, rloo or gigpo, not {self.algorithm!r}")
        if self.task_type not in TASK_TYPES:
            raise ConfigError(f"task_type must be one of {', '.join(TASK_TYPES)}, not {self.task_type!r}")
        if self.context not in ("full", "managed"):
            raise ConfigError(f"context must be full or managed, not {self.context!r}")
        if self.retriever not in RETRIEVERS:
            raise ConfigError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {self.retriever!r}")
        if self.code_mode not in MODES:
            raise ConfigError(f"code_mode must be one of {', '.join(MODES)}, not {self.code_mode!r}")
        try:
            self.device, self.dtype = check_device_spec(self.device), check_dtype_spec(self.dtype)
        except DeviceError as e:
            raise ConfigError(str(e).replace("--", "", 1)) from None
        if self.report_to not in TRACKERS:
            raise ConfigError(f"report_to must be one of {', '.join(TRACKERS)}, not {self.report_to!r}")
        if self.stage == "sft" and self.algorithm != "reinforce":
            raise ConfigError(f"algorithm={self.algorithm} is an RL setting; --stage sft takes none")
        positive = ("steps", "epochs", "group_size", "prompts_per_step", "micro_batch", "ppo_epochs", "lora_r",
                    "lora_alpha", "max_turns", "checkpoint_every", "keep_checkpoints", "concurrency", "context_tokens",
                    "notes_tokens")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("lr", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("kl_coef", "temperature", "clip_ratio", "dynamic_sampling", "demo_tasks"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if not 0 <= self.lora_dropout < 1 or not 0 <= self.demo_recovery <= 1:
            raise ConfigError("lora_dropout must be in [0, 1) and demo_recovery in [0, 1]")
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"curriculum must be one of {', '.join(CURRICULA)}, not {self.curriculum!r}")
        if not 0 < self.curriculum_decay <= 1 or not 0 <= self.curriculum_floor <= 1:
            raise ConfigError("curriculum_decay must be in (0, 1] and curriculum_floor in [0, 1]")
        if self.filter_low > self.filter_high:
            raise ConfigError(f"filter_low ({self.filter_low}) is above filter_high ({self.filter_high}): "
                              "every group would be dropped")
        for name in ("max_tool_calls", "max_new_tokens", "max_total_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name, value in TASK_TYPES[self.task_type].defaults.items():
            if getattr(self, name) in (None, ""):  # resolved here, so config.json records what was trained with
                setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def diff(self, other: dict[str, Any]) -> list[str]:
        mine = self.to_dict()
        return sorted(k for k in mine if k not in self.RESUMABLE and k in other and other[k] != mine[k])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research_agent.train",
                                description="LoRA RL (REINFORCE / GRPO / RLOO) and SFT for research and code agents")
    p.add_argument("--config", help="TOML (or YAML) file with any of the fields below")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    add_flags(p, TrainConfig)
    return p


def load_config(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """CLI flags override a TOML/YAML file (``--config``), which overrides the defaults."""
    args = _parser().parse_args(argv)
    try:
        values = load_file(args.config) if args.config else {}
        values.update(flag_values(args, TrainConfig))
        cfg = build(TrainConfig, values)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    return cfg, args
