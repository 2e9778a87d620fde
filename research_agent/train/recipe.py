"""``python -m research_agent.train.recipe``: the whole training loop in one resumable command.

corpus → research demonstrations (synth, real tool calls) → SFT-export → SFT (cold start) → RL
→ held-out evaluation of base, SFT and RL → paired comparison.  Every stage is the package's own
CLI called in-process with the flags the README's Results used, so this is a recipe, not a second
implementation.  A stage that finished leaves a marker in OUT and is skipped on the next run; the
ones that stop mid-way (trajectory synthesis, SFT, RL, eval) resume where they were, so an interrupted
recipe is simply started again.

    python -m research_agent.train.recipe --out runs/recipe              # hours on 2 CPU cores (below)
    python -m research_agent.train.recipe --out runs/quick --quick       # minutes: a smoke run

Every stage runs with the research budgets of configs/research.toml (10 turns, 8 tool calls, 3072
tokens).  Measured on 2 CPU cores with smollm2-135m: demonstrations ~35 s (all 1376 train
questions); SFT ~65 s a step of 4 (the default 240 demonstrations: 60 steps, ~65 min); one held-out
eval of 100 questions ~12 min at 16 in flight; RL at these budgets is not measured yet (4-turn RL
steps took 33-440 s, and a 10-turn rollout is several times longer).

The held-out questions are ``factbook-test``: the shipped task set's test split, separated from
the training split by document.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class Recipe:
    out: Path
    model: str = "smollm2-135m"
    demos: int = 240  # train questions with a research demonstration (1 SFT epoch: 60 steps of 4)
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

    @classmethod
    def quick(cls, out: Path, model: str) -> Recipe:
        return cls(out=out, model=model, demos=16, rl_steps=2, rl_prompts=2, eval_limit=6)


class StageFailed(RuntimeError):
    pass


def _agent_flags(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever,
            "--max-turns", str(r.max_turns), "--max-tool-calls", str(r.max_tool_calls),
            "--max-new-tokens", str(r.max_new_tokens), "--max-total-tokens", str(r.max_total_tokens)]


def _eval_sets(r: Recipe) -> list[str]:
    return ["--retriever", r.retriever,
            "--set", f"max_turns={r.max_turns}", "--set", f"max_tool_calls={r.max_tool_calls}",
            "--set", f"max_new_tokens={r.max_new_tokens}", "--set", f"max_total_tokens={r.max_total_tokens}"]


def stages(r: Recipe) -> list[tuple[str, str, list[str]]]:
    """(name, module, argv) in order; the module's ``main(argv)`` runs the stage."""
    from research_agent.tasks import default_task_file

    o = r.out
    evals = [("base", None), ("sft", o / "sft" / "adapter"), ("rl", o / "rl" / "adapter")]
    plan = [
        ("demonstrations", "synth.__main__", ["trajectories", "--qa", str(default_task_file()), "--policy", "reference",
                                     "--model", r.model, "--split", "train", "--limit", str(r.demos),
                                     "--out", str(o / "demonstrations"), "--concurrency", str(r.concurrency),
                                     "--retriever", r.retriever,
                                     "--max-turns", str(r.max_turns), "--max-tool-calls", str(r.max_tool_calls),
                                     "--set", f"max_total_tokens={r.max_total_tokens}"]),
        ("sft-export", "synth.__main__", ["sft-export", "--trajectories", str(o / "demonstrations"), "--out",
                                 str(o / "sft.jsonl"), "--min-f1", "0.8", "--tokenizer", r.model]),
        ("sft", "research_agent.train.__main__", ["--stage", "sft", "--model", r.model, "--tasks", str(o / "sft.jsonl"),
                                         "--lr", str(r.sft_lr), "--epochs", str(r.sft_epochs), "--micro-batch", "4",
                                         "--max-total-tokens", str(r.max_total_tokens), "--out", str(o / "sft")]),
        ("rl", "research_agent.train.__main__", ["--stage", "rl", "--model", r.model, "--init-adapter",
                                        str(o / "sft" / "adapter"), "--algorithm", "reinforce", "--group-size", "4",
                                        "--prompts-per-step", str(r.rl_prompts), "--steps", str(r.rl_steps),
                                        "--lr", str(r.rl_lr), "--kl-coef", "0", "--temperature", "1.0",
                                        "--checkpoint-every", "4", "--keep-checkpoints", "12",
                                        "--concurrency", str(r.concurrency), "--out", str(o / "rl"),
                                        *_agent_flags(r)]),
    ]
    for name, adapter in evals:
        argv = ["qa", "--bench", "factbook-test", "--limit", str(r.eval_limit), "--model", r.model,
                *_eval_sets(r), "--concurrency", str(r.concurrency), "--quiet", "--out", str(o / f"eval-{name}")]
        if adapter is not None:
            argv += ["--adapter", str(adapter)]
        plan.append((f"eval-{name}", "eval.cli", argv))
    plan.append(("compare", "eval.cli", ["compare", *(str(o / f"eval-{n}") for n, _ in evals),
                                         "--out", str(o / "compare")]))
    return plan


def _marker(out: Path, name: str) -> Path:
    return out / f".done-{name}"


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


def run_recipe(r: Recipe, only: list[str] | None = None) -> Path:
    r.out.mkdir(parents=True, exist_ok=True)
    for name, module, argv in stages(r):
        if only and name not in only:
            continue
        if _marker(r.out, name).exists():
            print(f"== {name}: done before, skipped", file=sys.stderr)
            continue
        run_stage(r.out, name, module, argv)
    return r.out / "compare"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research_agent.train.recipe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="recipe directory (stage outputs and done-markers)")
    p.add_argument("--model", default="smollm2-135m", help="the student model")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the loop runs, measures nothing")
    p.add_argument("--demos", type=int, help="train questions with a demonstration (default 240)")
    p.add_argument("--rl-steps", type=int, help="RL optimizer steps (default 30)")
    p.add_argument("--eval-limit", type=int, help="held-out factbook-test questions per eval (default 100)")
    from corpus.local import MODES as RETRIEVERS

    p.add_argument("--retriever", choices=RETRIEVERS,
                   help="how every stage searches the corpus (default hybrid; bm25 needs no embedding model)")
    p.add_argument("--only", nargs="*", help="run only these stages (names as printed)")
    args = p.parse_args(argv)
    out = Path(args.out)
    r = Recipe.quick(out, args.model) if args.quick else Recipe(out=out, model=args.model)
    for field in ("demos", "rl_steps", "eval_limit", "retriever"):
        if getattr(args, field) is not None:
            setattr(r, field, getattr(args, field))
    try:
        compare = run_recipe(r, args.only)
    except StageFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"\nrecipe done: the comparison is in {compare} (table.md, paired.md, metrics.png, funnel.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
