"""One config dataclass for training; each field's help is its documentation.

Defaults follow the seeds: group size 4, lr 5e-6 (RL), KL 0.05, LoRA r=16 α=32 dropout 0.05 on
q_proj/v_proj, temperature 0.7, max 5 turns, fast template, F1 + action penalty reward, and
REINFORCE with a batch-mean baseline (seed 003: the most stable and cheapest of REINFORCE / PPO /
GRPO).  A TOML file and CLI flags map onto the same fields.

Cohesive groups of settings are sections (``cfg.lora.r``, ``cfg.filters.low``); each of their settings
keeps the flat name it had before sections (``--lora-r``, ``lora_r = 8``), so commands, files and the
recipe's stage keys did not change.  The rollouts' agent config is one of them: ``cfg.agent`` is the
``AgentConfig`` (research) or ``CodeAgentConfig`` (code) that the rollouts run with, so config.json
records every setting of it and ``--resume`` checks all of them.

Code tasks are a second task type of the same trainer (``task_type = "code"``), not a second
trainer: only the task source, the rollout graph, the default reward and what counts as correct
differ (``research_agent.tasks``).  Settings left unset (None) whose sensible value differs by task
type — reward, tokens per turn and in total, tool calls — take that task type's default, and
config.json records the resolved value.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from corpus.local import MODES as RETRIEVERS
from research_agent.configs import (
    ConfigError,
    add_flags,
    build,
    flag_values,
    flat_dict,
    flat_settings,
    load_file,
    section,
    setting_names,
)
from research_agent.inference.devices import DeviceError, check_device_spec, check_dtype_spec

from .curriculum import CURRICULA
from .tracking import TRACKERS

__all__ = ["ConfigError", "TrainConfig", "load_config", "migrate"]


def _f(default, help: str):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class AgentFlags:
    """The agent settings that train takes as flags, with the trainer's defaults where they differ from
    the agent's own (eval's).  Not a section of its own: they resolve into ``TrainConfig.agent``, and
    each applies to the task type whose agent has it (``code_mode`` is the code agent's ``mode``)."""

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
    code_mode: str = _f("multi-tool", "code: multi-tool (search docs + execute + submit; the model learns when to "
                        "use which), code-only (execute + submit) or no-tools (one shot)")
    test_feedback: bool = _f(True, "code: a failed submission is answered with the failing tests and the episode goes "
                             "on (the seed's run-tests tool; the last submission is scored); false: a "
                             "submission ends the task, as in the code runs before this became the default")


AGENT_NAMES = {"code_mode": "mode"}  # flat name → agent field, where they differ
# Settings of the trainer's rollouts that are no flags: a code rollout takes every turn as sampled
# (a repeated failed submission must cost reward, not be drawn again out of the policy's sight).
ROLLOUT_SETTINGS: dict[str, dict[str, Any]] = {"research": {}, "code": {"redraw_repeats": 0}}
# The settings that exist for one task type only, by flat name.
ONLY_FOR = {"template": "research", "context": "research", "context_tokens": "research",
            "notes_tokens": "research", "code_mode": "code", "test_feedback": "code"}


def agent_class(task_type: str) -> type:
    """The agent config a task type's rollouts run with."""
    if task_type == "code":
        from research_agent.code.agent import CodeAgentConfig

        return CodeAgentConfig
    from research_agent.agent import AgentConfig

    return AgentConfig


@dataclass
class RetrievalSettings:
    corpus: str | None = _f(None, "corpus index directory; research default: the embedded corpus, code default: "
                            "the cached API-docs corpus (built from the installed libraries on first use)")
    url: str | None = _f(None, "use a retrieval service (python -m corpus serve) instead of a local index "
                         "(for code: one serving the API-docs corpus)")
    retriever: str = _f("hybrid", "search over a local corpus: dense, bm25 or hybrid (as eval's --retriever; code: "
                        "bm25 builds the API docs in seconds instead of embedding them for ~35 min on a CPU)")


@dataclass
class CodeSettings:
    demo_tasks: int = _f(0, "code SFT: demonstrate the first N tasks (0: all); each demonstration replays the "
                         "task's reference solution through the agent (search docs, execute, submit)")
    demo_recovery: float = _f(0.5, "code SFT: share of the demonstrations that first run a broken version of the "
                              "solution (cut off mid-line, or missing its import), read the error and fix it")
    docs_modules: list[str] = _f([], "code: modules documented when the API-docs corpus is first built "
                                 "(empty: the default stdlib + data-science set)")
    allow_unsafe_sandbox: bool = _f(False, "code: run rollouts even where the sandbox cannot contain model-written "
                                    "code (docs/security.md); without it such a level is refused before training")


@dataclass
class GigpoSettings:
    gamma: float = _f(0.95, "gigpo: discount of the final reward per later step (step returns)")
    omega: float = _f(1.0, "gigpo: weight of the step-level advantage added to the episode one")


@dataclass
class ComputeSettings:
    """Where and how the work runs; apart from dtype none of it changes what a run computes."""

    device: str = _f("auto", "where the policy trains and generates: auto (a CUDA GPU if torch sees one, else the "
                     "CPU), cpu, cuda or cuda:N")
    dtype: str = _f("auto", "base weights' precision: auto (bfloat16 on a GPU that has it, else float32), float32, "
                    "bfloat16 or float16; LoRA weights stay float32 (peft keeps trainable adapters in float32)")
    micro_batch: int = _f(2, "most rows in one forward/backward pass of the update (memory vs speed)")
    share_prefix: bool = _f(True, "run a prompt shared by a group's trajectories once per update (same update, "
                                  "fewer positions)")
    gradient_checkpointing: bool | None = _f(None, "recompute each layer's activations in the backward instead of "
                                             "keeping them; unset: per pass, when keeping them would take over "
                                             "--activation-budget, estimated from the pass's tokens and the model's "
                                             "size (with the 1.5 GB default the recipe's SFT stage peaks at 2.8 GB "
                                             "instead of 7.8 GB for 24 % more time, its RL stage at 3.6 instead of "
                                             "6.6 GB); a checkpointed RL update "
                                             "feeds whole sequences (a shared prompt needs the K/V cache "
                                             "checkpointed layers do not write); docs/benchmarks.md")
    activation_budget: float = _f(1.5, "GB of activations a forward pass may keep (gradient_checkpointing unset): "
                                  "1.5 keeps a trainer under 4 GB on a 16 GB laptop; where memory is plentiful "
                                  "(a 24 GB machine, a GPU) a larger one recomputes less and shares prompts")
    concurrency: int = _f(8, "trajectories generated concurrently through the batched policy")
    rollout_endpoint: str = _f("", "generate rollouts on this OpenAI-compatible server instead of in-process, in token "
                               "space (research-agent serve, or vLLM with --enable-lora); the trainer "
                               "publishes its adapter there after every step (docs/scaling.md)")


@dataclass
class LoraSettings:
    r: int = _f(16, "LoRA rank")
    alpha: int = _f(32, "LoRA alpha")
    dropout: float = _f(0.05, "LoRA dropout")
    targets: list[str] = _f(["q_proj", "v_proj"], "modules that get LoRA adapters")


@dataclass
class ScoringSettings:
    reward: str | None = _f(None, "reward spec: a name from rewards.REWARDS or 'name:weight,name:weight'; unset: "
                            "f1_penalty (research, seed 003) or code_shaped (code: the seed's shaping; code_torl "
                            "is ToRL's +1/-1/-0.5)")
    pass_threshold: float = _f(0.8, "research: F1 at or above which a trajectory counts as correct (pass rate, "
                               "filtering); a code trajectory is correct when its submission passes the tests")
    reward_fallback: float = _f(0.0, "reward given when a reward function raises (logged once per error type)")


@dataclass
class GroupFilters:
    """Which rollout groups and trajectories an RL step trains on."""

    low: float = _f(0.2, "drop groups whose accuracy is below this (Agent RL Scaling Law); <=0 disables")
    high: float = _f(0.8, "drop groups whose accuracy is above this; >=1 disables")
    zero_variance: bool = _f(True, "drop groups whose rewards are all equal (no signal)")
    dynamic_sampling: int = _f(0, "extra rollout rounds per step (DAPO dynamic sampling): while fewer than "
                                  "prompts_per_step groups survived the filters, draw that many more prompts; "
                                  "0 trains on whatever survived the first round")
    drop_void_turns: bool = _f(True, "exclude trajectories with a turn that was neither a valid action nor an "
                                     "answer (SimpleTIR)")


@dataclass
class CurriculumSettings:
    name: str = _f("none", "task draw order: none (one seeded shuffle, in order) or learnability (draw task "
                   "kinds in proportion to the running chance that a group of that kind is learnable: pass "
                   "rate strictly between 0 and 1 and inside the filter bounds)")
    key: str = _f("kind", "learnability curriculum: the task field (research) or attribute / meta entry "
                  "(code) that names a task's kind")
    decay: float = _f(0.7, "learnability curriculum: the evidence of past rounds is multiplied by this "
                      "every round, so the estimate follows the current policy")
    floor: float = _f(0.05, "learnability curriculum: the least weight a kind keeps, so none is dropped "
                      "for good")
    min_hops: int = _f(1, "research: draw only questions of at least N hops (2: the two-hop questions, where "
                       "naming the bridge entity earns nothing)")


@dataclass
class CheckpointSettings:
    every: int = _f(5, "save a checkpoint every N steps")
    keep: int = _f(3, "how many checkpoints to keep")


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
    retrieval: RetrievalSettings = section(RetrievalSettings, flat={"corpus": "corpus", "retrieval_url": "url",
                                                                    "retriever": "retriever"},
                                           help="where rollouts search")
    agent: Any = section(None, flat={f.name: AGENT_NAMES.get(f.name, f.name) for f in dataclasses.fields(AgentFlags)},
                         flags=AgentFlags, help="the agent config rollouts run with: AgentConfig (research) or "
                         "CodeAgentConfig (code); the flags above set part of it, a [agent] table any field")
    code: CodeSettings = section(CodeSettings, help="code tasks: demonstrations, API docs, sandbox")
    out: str = _f("runs/train", "run directory: config, metrics.jsonl, plots, checkpoints/")
    algorithm: str = _f("reinforce", "reinforce (batch-mean baseline; seed 003's most stable), grpo "
                        "(group-normalized advantages), rloo (leave-one-out baseline), gigpo (GRPO plus "
                        "step-level advantages among steps that start from the same observation)")
    gigpo: GigpoSettings = section(GigpoSettings, prefix="gigpo_", help="GiGPO's step-level advantage")
    group_size: int = _f(4, "trajectories per prompt (G)")
    prompts_per_step: int = _f(2, "prompts per optimizer step; the batch is prompts_per_step × group_size")
    steps: int = _f(30, "optimizer steps (rl)")
    epochs: int = _f(2, "passes over the SFT data (sft)")
    lr: float = _f(5e-6, "learning rate (seed: 5e-6 for RL; SFT with LoRA usually wants ~1e-4)")
    kl_coef: float = _f(0.05, "token-level KL penalty to the reference (the base model: adapter disabled); 0 skips "
                        "the reference forward pass (faster; the logged KL is then 0)")
    clip_ratio: float = _f(0.2, "PPO-style ratio clip, used when ppo_epochs > 1 reuses a batch")
    ppo_epochs: int = _f(1, "optimizer passes over one batch of rollouts (1 = on-policy, no clipping needed)")
    compute: ComputeSettings = section(ComputeSettings, help="devices, batching and memory layout")
    max_grad_norm: float = _f(1.0, "gradient clipping")
    lora: LoraSettings = section(LoraSettings, prefix="lora_", help="the LoRA adapter trained")
    scoring: ScoringSettings = section(ScoringSettings, help="the reward and what counts as correct")
    filters: GroupFilters = section(GroupFilters, flat={"filter_low": "low", "filter_high": "high",
                                                        "filter_zero_variance": "zero_variance",
                                                        "dynamic_sampling": "dynamic_sampling",
                                                        "drop_void_turns": "drop_void_turns"},
                                    help="which groups and trajectories a step trains on")
    curriculum: CurriculumSettings = section(CurriculumSettings, flat={"curriculum": "name", "curriculum_key": "key",
                                                                       "curriculum_decay": "decay",
                                                                       "curriculum_floor": "floor",
                                                                       "min_hops": "min_hops"},
                                             help="which tasks are drawn, in what order")
    checkpoints: CheckpointSettings = section(CheckpointSettings, flat={"checkpoint_every": "every",
                                                                        "keep_checkpoints": "keep"},
                                              help="how often checkpoints are saved and how many are kept")
    seed: int = _f(0, "random seed (data order, sampling)")
    report_to: str = _f("none", "also log every metrics row to none, tensorboard (OUT/tensorboard), trackio or wandb "
                        "(offline mode); the library is an optional extra")
    kl_alarm: float = _f(1.0, "stop with an alarm when the mean KL exceeds this")

    # settings that may change on --resume without changing what the run computes (a section's name
    # stands for all of its settings)
    RESUMABLE: ClassVar[tuple[str, ...]] = ("steps", "out", "compute.concurrency", "checkpoints", "kl_alarm",
                                            "compute.micro_batch", "compute.share_prefix",
                                            "compute.gradient_checkpointing", "compute.activation_budget",  # cost only
                                            "code.allow_unsafe_sandbox", "compute.device", "report_to",
                                            "compute.rollout_endpoint")

    def __post_init__(self) -> None:
        from research_agent.tasks import TASK_TYPES

        if self.task_type not in TASK_TYPES:
            raise ConfigError(f"task_type must be one of {', '.join(TASK_TYPES)}, not {self.task_type!r}")
        for f in dataclasses.fields(self):
            kind = f.metadata.get("section")
            if kind is not None and isinstance(getattr(self, f.name), dict):  # TrainConfig(lora={"r": 8}), config.json
                setattr(self, f.name, build(kind, getattr(self, f.name)))
        if not dataclasses.is_dataclass(self.agent):
            self.agent = self._rollout_agent(dict(self.agent or {}))
        elif not isinstance(self.agent, agent_class(self.task_type)):
            raise ConfigError(f"task_type {self.task_type} rolls out with {agent_class(self.task_type).__name__}, "
                              f"not {type(self.agent).__name__}")
        self._check()
        if self.scoring.reward in (None, ""):  # resolved here, so config.json records what was trained with
            self.scoring.reward = TASK_TYPES[self.task_type].defaults["reward"]

    def _rollout_agent(self, given: dict[str, Any]) -> Any:
        """The task type's agent config from the settings given (flat names or the agent's own), over the
        task type's defaults, over the trainer's defaults; checked as the flags always were."""
        from research_agent.tasks import TASK_TYPES

        cls, task_type = agent_class(self.task_type), self.task_type
        given = {AGENT_NAMES.get(k, k): v for k, v in given.items() if v is not None}  # unset: the default
        own = set(setting_names(cls))  # its fields, sections and their settings' flat names
        for flat, kind in ONLY_FOR.items():
            if kind != task_type and AGENT_NAMES.get(flat, flat) in given.keys() - own:
                raise ConfigError(f"{flat} is a {kind} setting; task_type {task_type} takes none")
        defaults = {AGENT_NAMES.get(f.name, f.name): f.default for f in dataclasses.fields(AgentFlags)}
        defaults.update({k: v for k, v in TASK_TYPES[task_type].defaults.items() if k in defaults})
        defaults.update(ROLLOUT_SETTINGS.get(task_type, {}))
        defaults = {k: v for k, v in defaults.items() if k in own and v is not None}
        self._check_agent({**defaults, **given})
        return build(cls, given, base=build(cls, defaults))  # a [agent] section table over the defaults too

    @staticmethod
    def _check_agent(values: dict[str, Any]) -> None:
        from research_agent.code.env import MODES

        if values.get("context", "full") not in ("full", "managed"):
            raise ConfigError(f"context must be full or managed, not {values['context']!r}")
        if values.get("mode", "multi-tool") not in MODES:
            raise ConfigError(f"code_mode must be one of {', '.join(MODES)}, not {values['mode']!r}")
        for name in ("max_turns", "context_tokens", "notes_tokens", "max_tool_calls", "max_new_tokens",
                     "max_total_tokens"):
            value = values.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}")
        if isinstance(values.get("temperature"), int | float) and values["temperature"] < 0:
            raise ConfigError(f"temperature must not be negative, not {values['temperature']}")

    def setting(self, name: str) -> Any:
        """A setting by its flat name (``lora_r``), as flags and error messages spell it."""
        flat = flat_settings(type(self))
        if name in flat:
            sec, sub = flat[name]
            return getattr(getattr(self, sec), sub)
        return getattr(self, name)

    def _check(self) -> None:
        if self.stage not in ("rl", "sft"):
            raise ConfigError(f"stage must be rl or sft, not {self.stage!r}")
        if self.algorithm not in ("reinforce", "grpo", "rloo", "gigpo"):
            raise ConfigError(f"algorithm must be reinforce, grpo, rloo or gigpo, not {self.algorithm!r}")
        self._check_agent(asdict(self.agent))
        if self.retrieval.retriever not in RETRIEVERS:
            raise ConfigError(f"retriever must be one of {', '.join(RETRIEVERS)}, not {self.retrieval.retriever!r}")
        c = self.compute
        try:
            c.device, c.dtype = check_device_spec(c.device), check_dtype_spec(c.dtype)
        except DeviceError as e:
            raise ConfigError(str(e).replace("--", "", 1)) from None
        if self.report_to not in TRACKERS:
            raise ConfigError(f"report_to must be one of {', '.join(TRACKERS)}, not {self.report_to!r}")
        if self.stage == "sft" and self.algorithm != "reinforce":
            raise ConfigError(f"algorithm={self.algorithm} is an RL setting; --stage sft takes none")
        positive = ("steps", "epochs", "group_size", "prompts_per_step", "micro_batch", "ppo_epochs", "lora_r",
                    "lora_alpha", "checkpoint_every", "keep_checkpoints", "concurrency")
        for name in positive:
            if self.setting(name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {self.setting(name)}")
        for name in ("lr", "max_grad_norm"):
            if not self.setting(name) > 0:
                raise ConfigError(f"{name} must be positive, not {self.setting(name)}")
        for name in ("kl_coef", "clip_ratio", "dynamic_sampling", "demo_tasks"):
            if self.setting(name) < 0:
                raise ConfigError(f"{name} must not be negative, not {self.setting(name)}")
        if not 0 <= self.lora.dropout < 1 or not 0 <= self.code.demo_recovery <= 1:
            raise ConfigError("lora_dropout must be in [0, 1) and demo_recovery in [0, 1]")
        cur = self.curriculum
        if cur.name not in CURRICULA:
            raise ConfigError(f"curriculum must be one of {', '.join(CURRICULA)}, not {cur.name!r}")
        if not 0 < cur.decay <= 1 or not 0 <= cur.floor <= 1:
            raise ConfigError("curriculum_decay must be in (0, 1] and curriculum_floor in [0, 1]")
        if cur.min_hops < 1 or (cur.min_hops > 1 and self.task_type != "research"):
            raise ConfigError(f"min_hops is a research setting of at least 1, not {cur.min_hops} "
                              f"(task_type {self.task_type})")
        if self.filters.low > self.filters.high:
            raise ConfigError(f"filter_low ({self.filters.low}) is above filter_high ({self.filters.high}): "
                              "every group would be dropped")

    def to_dict(self) -> dict[str, Any]:
        """The config, nested by section; the agent's settings by their flat names, as they always were."""
        return {**asdict(self), "agent": flat_dict(self.agent)}

    def diff(self, other: dict[str, Any]) -> list[str]:
        """The settings (by flat name where they have one) in which ``other``, a saved config.json of this
        or an earlier version, differs from this config in what the run computes; a setting ``other``
        does not record (it predates it) is not compared."""
        mine, theirs = _leaves(self.to_dict()), _leaves(migrate(other))
        names = {f"{sec}.{sub}": flat for flat, (sec, sub) in flat_settings(type(self)).items()}
        changed = (k for k in mine if k in theirs and theirs[k] != mine[k]
                   and not any(k == r or k.startswith(r + ".") for r in self.RESUMABLE))
        return sorted(names.get(k, k) for k in changed)


def _leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def migrate(saved: dict[str, Any]) -> dict[str, Any]:
    """A config.json written before sections (every setting flat) in today's nested shape, so that a run
    started then still resumes; a nested one is returned as it is.  The settings of the other task
    type's agent, which the flat config recorded but its rollouts never used, are dropped."""
    if isinstance(saved.get("agent"), dict):
        return saved
    flat, task_type = flat_settings(TrainConfig), saved.get("task_type", "research")
    out: dict[str, Any] = {}
    for name, value in saved.items():
        if name not in flat:
            out[name] = value
        elif ONLY_FOR.get(name, task_type) == task_type:
            sec, sub = flat[name]
            out.setdefault(sec, {})[sub] = value
    return out


FLAG_ALIASES = {"--adapter": "--init-adapter", "--endpoint": "--rollout-endpoint", "--mode": "--code-mode"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research_agent.train",
                                description="LoRA RL (REINFORCE / GRPO / RLOO) and SFT for research and code agents")
    p.add_argument("--config", help="TOML (or YAML) file with any of the settings below, by these names or as "
                   "[section] tables ([lora] r = 8)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    add_flags(p, TrainConfig)
    # the names eval, ask and synth use for the same things
    for alias, flag in FLAG_ALIASES.items():
        p.add_argument(alias, dest=flag[2:].replace("-", "_"), default=argparse.SUPPRESS, help=f"same as {flag}")
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
