"""``python -m research_agent.train.recipe``: the whole training loop in one resumable command.

corpus → research demonstrations (synth, real tool calls) [+ the student's own sampled runs, kept
when right and cited: rejection sampling] → SFT-export → SFT (cold start) → RL → held-out
evaluation of base, SFT and RL → paired comparison.  Every stage is the package's own CLI called
in-process with the flags the README's Results used, so this is a recipe, not a second
implementation.  A stage that finished leaves a marker in OUT and is skipped on the next run; the
ones that stop mid-way (trajectory synthesis, SFT, RL, eval) resume where they were, so an
interrupted recipe is simply started again.

    python -m research_agent.train.recipe --out runs/recipe              # hours on 2 CPU cores (below)
    python -m research_agent.train.recipe --out runs/quick --quick       # minutes: a smoke run

A chain longer than one working session persists in an artifact directory (``--artifacts DIR``,
or ``--preset NAME``, which names its own): each stage publishes its outputs and a card (command,
commit, input hashes, numbers) there when it ends, and long stages publish their newest
checkpoint or finished answers every ``--publish-minutes`` while they run.  In the next session,
on any machine, the same command restores the finished stages whose cards match, resumes the
partial one from its checkpoint and goes on; ``--stop-after MIN`` ends a session's share cleanly
(the running stage publishes and the recipe exits 3), so the session can commit the directory.
``research_agent.train.artifacts`` says what is stored.

Every stage runs with the research budgets of configs/research.toml (10 turns, 8 tool calls, 3072
tokens).  Measured on 2 CPU cores with smollm2-135m: demonstrations ~35 s (all 1376 train
questions); SFT ~65 s a step of 4 (the default 240 demonstrations: 60 steps, ~65 min); one held-out
eval of 100 questions ~12 min at 16 in flight.  docs/training.md ("Training the default model in
stages") has the stage plan and measured cost of the qwen2.5-coder-0.5b preset.

The held-out questions are ``factbook-test``: the shipped task set's test split, separated from
the training split by document.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXIT_STOPPED = 3  # --stop-after ran out: what ran is published, run the same command again to go on


@dataclass(frozen=True)
class EvalSet:
    """A held-out benchmark every model of the recipe is evaluated on; ``label`` names its stages."""

    label: str
    bench: str
    limit: int | None = None  # None: the recipe's eval_limit; 0: all questions


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
    # research budgets (configs/research.toml): a two-hop question takes up to a search for the pair,
    # one per side, open + find, and a search for the bridge; 8 calls leave room for one reformulation
    max_turns: int = 10
    max_tool_calls: int = 8
    max_new_tokens: int = 48
    max_total_tokens: int = 3072
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
    evals: tuple[EvalSet, ...] = (EvalSet("", "factbook-test"),)
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
                  evals=(EvalSet("factbook", "factbook-test", 200), EvalSet("two-hop", "factbook-two-hop", 0),
                         EvalSet("squad", "squad-open", 200), EvalSet("strategyqa", "strategyqa", 100)),
                  name="research-qwen-v1", artifacts=artifacts or artifacts_root() / "research-qwen-v1")


PRESETS = {"research-qwen-v1": research_qwen_v1}


class StageFailed(RuntimeError):
    pass


class StoppedForTime(RuntimeError):
    pass


def _agent_flags(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever,
            "--max-turns", str(r.max_turns), "--max-tool-calls", str(r.max_tool_calls),
            "--max-new-tokens", str(r.max_new_tokens), "--max-total-tokens", str(r.max_total_tokens)]


def _eval_sets(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever,
            "--set", f"max_turns={r.max_turns}", "--set", f"max_tool_calls={r.max_tool_calls}",
            "--set", f"max_new_tokens={r.max_new_tokens}", "--set", f"max_total_tokens={r.max_total_tokens}"]


def _synth_flags(r: Recipe) -> list[str]:
    flags = ["--concurrency", str(r.concurrency), "--retriever", r.retriever,
             "--max-turns", str(r.max_turns), "--max-tool-calls", str(r.max_tool_calls)]
    if r.self_samples:  # the student's own runs must be sampled under the budgets it is evaluated with
        flags += ["--max-new-tokens", str(r.max_new_tokens)]
    return [*flags, "--set", f"max_total_tokens={r.max_total_tokens}"]


def models(r: Recipe) -> list[tuple[str, Path | None]]:
    """The models every held-out set evaluates: the untrained student, then each trained adapter."""
    evals = [("base", None), ("sft", r.out / "sft" / "adapter")]
    if r.rl_steps:
        evals.append(("rl", r.out / "rl" / "adapter"))
    return evals


def stages(r: Recipe) -> list[tuple[str, str, list[str]]]:
    """(name, module, argv) in order; the module's ``main(argv)`` runs the stage."""
    from research_agent.tasks import default_task_file

    o = r.out
    qa = str(default_task_file())
    demos = ["trajectories", "--qa", qa, "--policy", "reference", "--model", r.model, "--split", "train"]
    if r.demos is not None:
        demos += ["--limit", str(r.demos)]
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
        ("sft", "research_agent.train.__main__", ["--stage", "sft", "--model", r.model, "--tasks", str(o / "sft.jsonl"),
                                         "--lr", str(r.sft_lr), "--epochs", str(r.sft_epochs), "--micro-batch", "4",
                                         "--max-total-tokens", str(r.max_total_tokens),
                                         *(["--checkpoint-every", str(r.sft_checkpoint_every)]
                                           if r.sft_checkpoint_every != 5 else []),
                                         "--out", str(o / "sft")]),
    ]
    if r.rl_steps:
        plan.append(("rl", "research_agent.train.__main__", [
            "--stage", "rl", "--model", r.model, "--init-adapter", str(o / "sft" / "adapter"), "--algorithm",
            "reinforce", "--group-size", "4", "--prompts-per-step", str(r.rl_prompts), "--steps", str(r.rl_steps),
            "--lr", str(r.rl_lr), "--kl-coef", "0", "--temperature", "1.0",
            "--checkpoint-every", "4", "--keep-checkpoints", "12",
            "--concurrency", str(r.concurrency), "--out", str(o / "rl"), *_agent_flags(r)]))
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
        final = models(r)[-1][1]
        plan.append(("ship", "research_agent.train.ship", [
            "--adapter", str(final), "--model", r.model, "--name", r.name, "--out", str(r.artifacts),
            "--retriever", r.retriever, "--set", f"max_turns={r.max_turns}", "--set", f"max_tool_calls={r.max_tool_calls}",
            "--set", f"max_new_tokens={r.max_new_tokens}", "--set", f"max_total_tokens={r.max_total_tokens}",
            *(str(o / f"eval-{n}-{ev.label}" if ev.label else o / f"eval-{n}")
              for ev in r.evals for n, _ in models(r))]))
    return plan


def _marker(out: Path, name: str) -> Path:
    return out / f".done-{name}"


def _outputs(out: Path, argv: list[str]) -> list[Path]:
    """What a stage writes under OUT: the value of its ``--out``."""
    return [Path(argv[i + 1]) for i, a in enumerate(argv[:-1])
            if a == "--out" and Path(argv[i + 1]).resolve().is_relative_to(out.resolve())]


def stage_numbers(outputs: list[Path]) -> dict:
    """The figures a card shows: an eval's metrics, a training run's last step."""
    numbers: dict = {}
    for path in outputs:
        results, metrics = path / "results.json", path / "metrics.jsonl"
        if results.is_file():
            try:
                data = json.loads(results.read_text())
                numbers.update({k: v for k, v in data.get("metrics", {}).items() if isinstance(v, (int, float))})
                numbers["questions"] = data.get("metrics", {}).get("n", data.get("n"))
            except ValueError:
                pass
        elif metrics.is_file():
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip().startswith("{")]
            if rows:
                numbers.update({k: v for k, v in rows[-1].items() if isinstance(v, (int, float))})
        elif path.suffix == ".jsonl" and path.is_file():
            numbers["examples"] = sum(1 for line in path.read_text().splitlines() if line.strip())
    return numbers


class Publisher:
    """Publishes one stage into the artifact directory: at its end, and every ``minutes`` while it runs."""

    def __init__(self, r: Recipe, name: str, module: str, argv: list[str], minutes: float):
        from .artifacts import ArtifactStore, StageCard, code_commit, display_argv, stage_inputs, stage_key

        self.r, self.name = r, name
        self.store = ArtifactStore(r.artifacts) if r.artifacts is not None else None
        inputs = stage_inputs(argv, r.out)
        shown = module.removesuffix(".__main__").replace("eval.cli", "eval")
        self.card = StageCard(stage=name, key=stage_key(module, argv, r.out, inputs),
                              command=f"python -m {shown} {shlex.join(display_argv(argv, r.out))}",
                              commit=code_commit(), inputs=inputs)
        self.outputs = _outputs(r.out, argv)
        self.minutes, self.started = minutes, time.time()
        self.earlier = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def matching(self):
        """The stored card of this stage if it was made from the same settings and inputs."""
        if self.store is None:
            return None
        card = self.store.card(self.name)
        if card is None:
            return None
        if card.key != self.card.key:
            print(f"== {self.name}: the artifact's card was made with other settings or inputs "
                  f"(key {card.key}, now {self.card.key}); running the stage again", file=sys.stderr)
            return None
        return card

    def publish(self, status: str) -> None:
        if self.store is None:
            return
        from .artifacts import write_index

        self.card.status = status
        self.card.seconds = round(self.earlier + time.time() - self.started, 1)
        self.card.numbers = stage_numbers(self.outputs)
        self.store.publish(self.name, self.r.out, self.outputs, self.card)
        write_index(self.store)

    def __enter__(self):
        if self.store is not None and self.minutes > 0:
            self._thread = threading.Thread(target=self._loop, name=f"publish-{self.name}", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.minutes * 60):
            try:
                self.publish("partial")
            except Exception as e:  # a checkpoint rotated away mid-copy: the next round gets the new one
                print(f"warning: publishing {self.name} part-way failed ({e}); retrying later", file=sys.stderr)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def run_stage(out: Path, name: str, module: str, argv: list[str]) -> None:
    import importlib

    if name in ("sft", "rl") and (out / name / "checkpoints").exists():
        argv = [*argv, "--resume"]  # an interrupted training run continues from its last checkpoint
    shown = module.removesuffix(".__main__").replace("eval.cli", "eval")
    print(f"\n== {name}: python -m {shown} {' '.join(argv)}", file=sys.stderr, flush=True)
    t0 = time.time()
    rc = importlib.import_module(module).main(argv)
    if rc not in (0, None):
        raise StageFailed(f"stage {name} failed (exit {rc}); fix the cause and run the recipe again: "
                          "finished stages are skipped, interrupted ones resume")
    _marker(out, name).write_text(f"{time.time() - t0:.1f} s\n")


def _stage_with_artifacts(r: Recipe, name: str, module: str, argv: list[str], publish_minutes: float) -> None:
    """Restore the stage if its card matches, else run it (from a partial artifact if there is one)."""
    pub = Publisher(r, name, module, argv, publish_minutes)
    card = pub.matching()
    if card is not None:
        pub.store.restore(name, r.out)
        pub.card.sessions, pub.earlier = card.sessions + (card.status == "partial"), card.seconds
        if card.status == "done":
            _marker(r.out, name).write_text(f"{card.seconds:.1f} s (restored from {pub.store.root})\n")
            print(f"== {name}: restored from {pub.store.stage_dir(name)} ({card.seconds / 60:.0f} min when it ran)",
                  file=sys.stderr)
            return
        print(f"== {name}: resuming from the part published in {pub.store.stage_dir(name)}", file=sys.stderr)
    with pub:
        try:
            run_stage(r.out, name, module, argv)
        except (KeyboardInterrupt, StoppedForTime):
            pub.publish("partial")
            raise
    pub.publish("done")


def run_recipe(r: Recipe, only: list[str] | None = None, publish_minutes: float = 20.0,
               stop_after: float | None = None) -> Path:
    r.out.mkdir(parents=True, exist_ok=True)
    timer = _stop_timer(stop_after) if stop_after else None
    try:
        for name, module, argv in stages(r):
            if only and name not in only:
                continue
            if _marker(r.out, name).exists():
                print(f"== {name}: done before, skipped", file=sys.stderr)
                continue
            if r.artifacts is None:
                run_stage(r.out, name, module, argv)
            else:
                _stage_with_artifacts(r, name, module, argv, publish_minutes)
    finally:
        if timer is not None:
            timer.cancel()
    return r.out / ("compare" if not r.evals[0].label else f"compare-{r.evals[0].label}")


def _stop_timer(minutes: float) -> threading.Timer:
    """SIGINT to this process after ``minutes``: the running stage stops as on Ctrl-C and publishes."""
    timer = threading.Timer(minutes * 60, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research_agent.train.recipe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="recipe directory (stage outputs and done-markers)")
    p.add_argument("--model", default=None, help="the student model (default smollm2-135m)")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the loop runs, measures nothing")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="a whole recipe by name: research-qwen-v1 trains the default model in stages")
    p.add_argument("--demos", type=int, help="train questions with a demonstration (default 240)")
    p.add_argument("--rl-steps", type=int, help="RL optimizer steps (default 30)")
    p.add_argument("--eval-limit", type=int, help="held-out factbook-test questions per eval (default 100)")
    from corpus.local import MODES as RETRIEVERS

    p.add_argument("--retriever", choices=RETRIEVERS,
                   help="how every stage searches the corpus (default hybrid; bm25 needs no embedding model)")
    p.add_argument("--only", nargs="*", help="run only these stages (names as printed)")
    p.add_argument("--artifacts", "--resume-from", dest="artifacts", default=None,
                   help="artifact directory: stages publish there and are restored or resumed from it")
    p.add_argument("--publish-minutes", type=float, default=20.0,
                   help="how often a running stage publishes its newest checkpoint or answers")
    p.add_argument("--stop-after", type=float, default=None, metavar="MIN",
                   help="stop after MIN minutes: the running stage publishes what it has, exit 3")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.preset:
        r = PRESETS[args.preset](out, Path(args.artifacts) if args.artifacts else None)
    elif args.quick:
        r = Recipe.quick(out, args.model or "smollm2-135m")
    else:
        r = Recipe(out=out, model=args.model or "smollm2-135m")
    if args.model and args.preset:
        r = replace(r, model=args.model)
    for name in ("demos", "rl_steps", "eval_limit", "retriever"):
        if getattr(args, name) is not None:
            setattr(r, name, getattr(args, name))
    if args.artifacts and not args.preset:
        r.artifacts = Path(args.artifacts)
    # a job started in the background (setsid, nohup, &) inherits SIGINT ignored, which would make
    # Ctrl-C, `kill -INT` and --stop-after do nothing; SIGTERM (a session's end) stops it the same way
    handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        compare = run_recipe(r, args.only, publish_minutes=args.publish_minutes, stop_after=args.stop_after)
    except StageFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = f"; the stage's part is published in {r.artifacts}" if r.artifacts else ""
        print(f"\nrecipe stopped{where}: run the same command again to go on", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    print(f"\nrecipe done: the comparison is in {compare} (table.md, paired.md, metrics.png, funnel.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
