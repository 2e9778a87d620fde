"""Which stages a recipe runs, in order, and the exact flags of each: the plan, not its running.

Every stage is one of the package's own CLIs (``synth``, ``research_agent.train``, ``eval``,
``recipe.ship``) with the flags the results in docs/ were made with, so the recipe is a recipe and
not a second implementation.  A stage's module name and argv are half of its artifact key
(``recipe.artifacts``): renaming a module or reordering flags makes every stored stage run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from research_agent.agent import AgentConfig

# research budgets (configs/research.toml holds the same): a two-hop question takes up to a search
# for the pair, one per side, open + find, and a search for the bridge; 8 calls leave room for one
# reformulation
RESEARCH_BUDGETS = {"max_turns": 10, "max_tool_calls": 8, "max_new_tokens": 48, "max_total_tokens": 3072}
BUDGETS = tuple(RESEARCH_BUDGETS)


@dataclass(frozen=True)
class EvalSet:
    """A held-out benchmark every model of the recipe is evaluated on; ``label`` names its stages."""

    label: str
    bench: str
    limit: int | None = None  # None: the recipe's eval_limit; 0: all questions


@dataclass(frozen=True)
class RLArm:
    """One RL run from the SFT adapter, named ``rl-<label>``: arms differ only in their reward."""

    label: str
    reward: str  # a name from rewards.REWARDS or a weighted spec "f1_penalty:1.0,carr:0.3"


@dataclass(frozen=True)
class Round:
    """A later round of rejection sampling (expert iteration): a trained model samples its own runs on
    train questions, the right and cited ones are its SFT data, and SFT continues from that model.
    Its stages are ``samples-<label>``, ``sft-export-<label>`` and ``sft-<label>``."""

    label: str
    start: str  # the model it samples with and continues from: "sft", "rl", or an earlier round's "sft-<label>"
    questions: int  # train questions sampled
    samples: int = 2
    temperature: float = 0.7
    min_hops: int = 1  # 2: only the two-hop questions
    per_kind: int | None = None
    lr: float = 1e-4


@dataclass
class Recipe:
    out: Path
    model: str = "smollm2-135m"
    demos: int | None = 240  # train questions with a research demonstration (None: all 1376)
    sft_lr: float = 5e-4
    sft_epochs: int = 1
    rl_steps: int = 30
    rl_lr: float = 2e-4
    rl_prompts: int = 4
    eval_limit: int = 100
    # the agent every stage runs: demonstrations, the student's samples, RL rollouts, evals and the
    # shipped agent.json take its budgets, so a model is evaluated under the budgets it trained with
    agent: AgentConfig = field(default_factory=lambda: AgentConfig(**RESEARCH_BUDGETS))
    concurrency: int = 8
    # every stage searches the same way: the demonstrations' hits are what SFT imitates and RL and the
    # evals must see the same ranking; "bm25" skips the dense encoder (faster on a CPU, no embedding model)
    retriever: str = "hybrid"
    # rejection sampling (expert iteration's first round): the untrained student answers this many
    # train questions `samples` times at `sample_temperature`; its right, cited runs join the SFT data
    self_samples: int = 0
    samples: int = 2
    sample_temperature: float = 0.7
    per_kind: int | None = None  # SFT data: at most N trajectories of each kind and source
    require_citations: bool = False  # SFT data: the cited chunks must support the answer
    sft_checkpoint_every: int = 5
    start_adapter: Path | None = None  # SFT continues from this adapter (a shipped agent) instead of a fresh one
    state_bridges: bool = False  # demonstrations write each two-hop bridge in a <think> (synth --state-bridges)
    rl_min_hops: int = 1  # 2: RL draws only two-hop train questions
    evals: tuple[EvalSet, ...] = (EvalSet("", "factbook-test"),)
    # RL runs side by side from the one SFT adapter (a reward ablation); none: one run, "rl", with the
    # task type's default reward
    rl_arms: tuple[RLArm, ...] = ()
    eval_base: bool = True  # evaluate the untrained model too (an ablation compares arms with the SFT start)
    rounds: tuple[Round, ...] = ()  # later rounds of rejection sampling, after RL
    ship_model: str | None = None  # the evaluated model to ship (e.g. "sft"); None: the last one
    # GB of activations a training pass may keep before recomputing them (the trainer's default, 1.5,
    # if None): what this machine can spare, so not part of a stage's key (artifacts.COST_ONLY_FLAGS)
    activation_budget: float | None = None
    name: str = ""  # the shipped agent's name (`ask --agent NAME`); "" ships nothing
    artifacts: Path | None = None

    @classmethod
    def quick(cls, out: Path, model: str) -> Recipe:
        return cls(out=out, model=model, demos=16, rl_steps=2, rl_prompts=2, eval_limit=6)


def research_qwen_v1(out: Path, artifacts: Path | None = None) -> Recipe:
    """The default model trained in stages: docs/training.md ("Training the default model in stages")."""
    from research_agent.shipped import artifacts_root

    return Recipe(out=out, model="qwen2.5-coder-0.5b", demos=None, self_samples=32, samples=2,
                  per_kind=40, require_citations=True, sft_lr=2e-4, sft_epochs=1, sft_checkpoint_every=2,
                  rl_steps=32, rl_lr=5e-5,
                  # round 2 aims at two-hop questions: the RL model samples its own runs on 192 of them
                  rounds=(Round("r1", "rl", questions=192, samples=2, min_hops=2),), ship_model="rl",
                  evals=(EvalSet("factbook", "factbook-test", 200), EvalSet("two-hop", "factbook-two-hop", 0),
                         EvalSet("squad", "squad-open", 200), EvalSet("strategyqa", "strategyqa", 100)),
                  name="research-qwen-v1", artifacts=artifacts or artifacts_root() / "research-qwen-v1")


def research_qwen_v2(out: Path, artifacts: Path | None = None) -> Recipe:
    """research-qwen-v1 stops one lookup short on "capital of the country bordering X and Y" (40 % of
    the two-hop set, 1 of 63 right): it names the bridge country.  v2 continues from v1's shipped
    adapter with SFT on more demonstrations of every kind (60 each instead of 40, so 60 of the
    three-lookup kind), then RL on two-hop questions only, where the bridge country earns nothing.
    Evaluated on the sets v1 was; compare with v1's runs by ``eval compare``."""
    from research_agent.shipped import artifacts_root

    v1 = artifacts_root() / "research-qwen-v1" / "adapter"
    return Recipe(out=out, model="qwen2.5-coder-0.5b", demos=None, per_kind=60, require_citations=True,
                  start_adapter=v1, sft_lr=1e-4, sft_epochs=1, sft_checkpoint_every=2,
                  rl_steps=32, rl_lr=5e-5, rl_min_hops=2, eval_base=False, ship_model="rl",
                  evals=(EvalSet("factbook", "factbook-test", 200), EvalSet("two-hop", "factbook-two-hop", 0)),
                  name="research-qwen-v2", artifacts=artifacts or artifacts_root() / "research-qwen-v2")


def research_qwen_v3(out: Path, artifacts: Path | None = None) -> Recipe:
    """research-qwen-v2 solves 1 of 63 "capital of the country bordering X and Y" questions and
    rarely searches the bridge country (3 of 63): it searches X's capital, copying a name from the
    question, since its demonstrations carried the bridge only inside the last query.  v3 continues
    from v2's RL adapter (its committed ``rl`` stage, the adapter v2 ships) with SFT on demonstrations that state each bridge in a <think> before
    using it (30 per kind: the one-hop kinds keep their share), then 16 RL steps on two-hop
    questions, whose metrics now split reward by kind."""
    from research_agent.shipped import artifacts_root

    v2 = artifacts_root() / "research-qwen-v2" / "stages" / "rl" / "files" / "rl" / "adapter"  # what v2 ships
    return Recipe(out=out, model="qwen2.5-coder-0.5b", demos=None, per_kind=30, require_citations=True,
                  state_bridges=True, start_adapter=v2, sft_lr=1e-4, sft_epochs=1, sft_checkpoint_every=2,
                  rl_steps=16, rl_lr=5e-5, rl_min_hops=2, eval_base=False, ship_model="rl",
                  evals=(EvalSet("factbook", "factbook-test", 200), EvalSet("two-hop", "factbook-two-hop", 0)),
                  name="research-qwen-v3", artifacts=artifacts or artifacts_root() / "research-qwen-v3")


def reward_ablation_smollm2(out: Path, artifacts: Path | None = None) -> Recipe:
    """Which reward teaches research best, from one SFT start: F1 with the action penalty alone, with the
    citation-aware rubric reward (CaRR), with the tool-efficiency reward (OTC); 30 steps each."""
    from research_agent.shipped import artifacts_root

    return Recipe(out=out, model="smollm2-135m", rl_steps=30, eval_base=False,
                  rl_arms=(RLArm("f1", "f1_penalty"), RLArm("carr", "f1_penalty:1.0,carr:0.3"),
                           RLArm("otc", "f1_penalty:1.0,otc:0.3")),
                  evals=(EvalSet("factbook", "factbook-test", 200),),
                  artifacts=artifacts or artifacts_root() / "reward-ablation-smollm2")


PRESETS = {"research-qwen-v1": research_qwen_v1, "research-qwen-v2": research_qwen_v2,
           "research-qwen-v3": research_qwen_v3, "reward-ablation-smollm2": reward_ablation_smollm2}


def _flags(r: Recipe, names: tuple[str, ...] = BUDGETS) -> list[str]:
    """The agent's budgets as the trainer's (and synth's) own flags: ``--max-turns 10``."""
    return [a for n in names for a in (f"--{n.replace('_', '-')}", str(getattr(r.agent, n)))]


def _sets(r: Recipe, names: tuple[str, ...] = BUDGETS) -> list[str]:
    """The agent's budgets as AgentConfig settings: ``--set max_turns=10`` (eval, synth, ship)."""
    return [a for n in names for a in ("--set", f"{n}={getattr(r.agent, n)}")]


# How each CLI takes the one agent config.  The spellings differ because the CLIs do (train has flags,
# eval `--set`), and they are frozen: a stage's argv is half its artifact key, so respelling one would
# make every committed stage run again (tests/recipe/test_artifacts.py checks the plan against the cards).
def _agent_flags(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever, *_flags(r)]


def _eval_sets(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever, *_sets(r)]


def _synth_flags(r: Recipe, sampling: bool = False) -> list[str]:
    # the student's own runs are sampled under the budgets it is evaluated with, turn length included
    turn = ("max_new_tokens",) if r.self_samples or sampling else ()
    return ["--concurrency", str(r.concurrency), "--retriever", r.retriever,
            *_flags(r, ("max_turns", "max_tool_calls", *turn)), *_sets(r, ("max_total_tokens",))]


def _memory_flags(r: Recipe) -> list[str]:
    return ["--activation-budget", str(r.activation_budget)] if r.activation_budget is not None else []


def _check_agent(r: Recipe) -> None:
    """Only the budgets reach the stages: any other agent setting would be silently dropped."""
    default = AgentConfig()
    other = [f.name for f in fields(AgentConfig)
             if f.name not in BUDGETS and getattr(r.agent, f.name) != getattr(default, f.name)]
    if other:
        raise ValueError(f"the recipe passes only the agent's budgets ({', '.join(BUDGETS)}) to its stages; "
                         f"{', '.join(other)} would be ignored: leave them at their defaults")


def models(r: Recipe) -> list[tuple[str, Path | None]]:
    """The models every held-out set evaluates: the untrained student, then each trained adapter."""
    evals = [("base", None)] if r.eval_base else []
    evals.append(("sft", r.out / "sft" / "adapter"))
    if r.rl_steps:
        evals += [(name, r.out / name / "adapter") for name, _ in rl_runs(r)]
    evals += [(f"sft-{k.label}", r.out / f"sft-{k.label}" / "adapter") for k in r.rounds]
    return evals


def rl_runs(r: Recipe) -> list[tuple[str, str | None]]:
    """(stage name, reward spec or None for the task type's default) of every RL run."""
    return [(f"rl-{a.label}", a.reward) for a in r.rl_arms] or [("rl", None)]


def stages(r: Recipe) -> list[tuple[str, str, list[str]]]:
    """(name, module, argv) in order; the module's ``main(argv)`` runs the stage."""
    from research_agent.tasks import default_task_file

    _check_agent(r)
    o = r.out
    qa = str(default_task_file())
    demos = ["trajectories", "--qa", qa, "--policy", "reference", "--model", r.model, "--split", "train"]
    if r.demos is not None:
        demos += ["--limit", str(r.demos)]
    if r.state_bridges:
        demos.append("--state-bridges")
    plan = [("demonstrations", "synth.__main__", [*demos, "--out", str(o / "demonstrations"), *_synth_flags(r)])]
    sources = [str(o / "demonstrations")]
    if r.self_samples:
        plan.append(("samples-r0", "synth.__main__", [
            "trajectories", "--qa", qa, "--policy", "model", "--model", r.model, "--split", "train",
            "--limit", str(r.self_samples), "--samples", str(r.samples), "--temperature", str(r.sample_temperature),
            "--out", str(o / "samples-r0"), *_synth_flags(r)]))
        sources.append(str(o / "samples-r0"))
    export = ["sft-export", "--trajectories", *sources, "--out", str(o / "sft.jsonl"), "--min-f1", "0.8",
              "--tokenizer", r.model]
    if r.require_citations:
        export.append("--require-citations")
    if r.per_kind is not None:
        export += ["--per-kind", str(r.per_kind)]
    plan += [
        ("sft-export", "synth.__main__", export),
        ("sft", "research_agent.train.__main__", ["--stage", "sft", "--model", r.model,
                                         *(["--init-adapter", str(r.start_adapter)] if r.start_adapter else []),
                                         "--tasks", str(o / "sft.jsonl"),
                                         "--lr", str(r.sft_lr), "--epochs", str(r.sft_epochs), "--micro-batch", "4",
                                         "--max-total-tokens", str(r.agent.max_total_tokens), *_memory_flags(r),
                                         *(["--checkpoint-every", str(r.sft_checkpoint_every)]
                                           if r.sft_checkpoint_every != 5 else []),
                                         "--out", str(o / "sft")]),
    ]
    for name, reward in rl_runs(r) if r.rl_steps else []:
        plan.append((name, "research_agent.train.__main__", [
            "--stage", "rl", "--model", r.model, "--init-adapter", str(o / "sft" / "adapter"), "--algorithm",
            "reinforce", "--group-size", "4", "--prompts-per-step", str(r.rl_prompts), "--steps", str(r.rl_steps),
            "--lr", str(r.rl_lr), "--kl-coef", "0", "--temperature", "1.0",
            *(["--reward", reward] if reward else []),
            "--checkpoint-every", "4", "--keep-checkpoints", "12", *_memory_flags(r),
            "--concurrency", str(r.concurrency), "--out", str(o / name), *_agent_flags(r),
            *(["--min-hops", str(r.rl_min_hops)] if r.rl_min_hops > 1 else [])]))
    for k in r.rounds:
        start = str(o / k.start / "adapter")
        plan += [
            (f"samples-{k.label}", "synth.__main__", [
                "trajectories", "--qa", qa, "--policy", "model", "--model", r.model, "--adapter", start,
                "--split", "train", "--min-hops", str(k.min_hops), "--limit", str(k.questions),
                "--samples", str(k.samples), "--temperature", str(k.temperature),
                "--out", str(o / f"samples-{k.label}"), *_synth_flags(r, sampling=True)]),
            (f"sft-export-{k.label}", "synth.__main__", [
                "sft-export", "--trajectories", str(o / f"samples-{k.label}"), "--out", str(o / f"sft-{k.label}.jsonl"),
                "--min-f1", "0.8", "--tokenizer", r.model, "--require-citations",
                *(["--per-kind", str(k.per_kind)] if k.per_kind is not None else [])]),
            (f"sft-{k.label}", "research_agent.train.__main__", [
                "--stage", "sft", "--model", r.model, "--init-adapter", start, "--tasks", str(o / f"sft-{k.label}.jsonl"),
                "--lr", str(k.lr), "--epochs", "1", "--micro-batch", "4", "--max-total-tokens", str(r.agent.max_total_tokens),
                "--checkpoint-every", "2", *_memory_flags(r), "--out", str(o / f"sft-{k.label}")]),
        ]
    for ev in r.evals:
        suffix = f"-{ev.label}" if ev.label else ""
        limit = r.eval_limit if ev.limit is None else ev.limit
        for name, adapter in models(r):
            argv = ["qa", "--bench", ev.bench, *(["--limit", str(limit)] if limit else []), "--model", r.model,
                    *_eval_sets(r), "--concurrency", str(r.concurrency), "--quiet",
                    "--out", str(o / f"eval-{name}{suffix}")]
            if adapter is not None:
                argv += ["--adapter", str(adapter)]
            plan.append((f"eval-{name}{suffix}", "eval.cli", argv))
        # an eval staged over sessions answers on each session's commit: compare it, flagged as mixed
        mixed = ["--allow-mixed-code"] if r.artifacts is not None else []
        plan.append((f"compare{suffix}", "eval.cli", ["compare", *(str(o / f"eval-{n}{suffix}") for n, _ in models(r)),
                                                     "--out", str(o / f"compare{suffix}"), *mixed]))
    if r.name and r.artifacts is not None:
        final = dict(models(r))[r.ship_model] if r.ship_model else models(r)[-1][1]
        plan.append(("ship", "recipe.ship", [
            "--adapter", str(final), "--model", r.model, "--name", r.name, "--out", str(r.artifacts), *_eval_sets(r),
            *(str(o / f"eval-{n}-{ev.label}" if ev.label else o / f"eval-{n}")
              for ev in r.evals for n, _ in models(r))]))
    return plan
