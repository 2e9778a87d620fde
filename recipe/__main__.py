"""``python -m recipe``: see the package's docstring."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from . import __doc__ as RECIPE_DOC  # noqa: E402
from .plan import PRESETS, Recipe  # noqa: E402
from .run import EXIT_STOPPED, StageFailed, run_recipe  # noqa: E402


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m recipe", description=RECIPE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="recipe directory (stage outputs and done-markers)")
    p.add_argument("--model", default=None, help="the student model (default smollm2-135m)")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the loop runs, measures nothing")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="a whole recipe by name: research-qwen-v1 trains the default model in stages, "
                        "research-qwen-v2 continues it aimed at two-hop questions, research-qwen-v3 continues "
                        "v2 with demonstrations that state each two-hop bridge, "
                        "reward-ablation-smollm2 compares three RL rewards from one SFT start")
    p.add_argument("--demos", type=int, help="train questions with a demonstration (default 240)")
    p.add_argument("--rl-steps", type=int, help="RL optimizer steps (default 30)")
    p.add_argument("--eval-limit", type=int, help="held-out factbook-test questions per eval (default 100)")
    from corpus.local import add_retriever_flag

    add_retriever_flag(p, default=None,
                       help="how every stage searches the corpus (default hybrid; bm25 needs no embedding model)")
    p.add_argument("--activation-budget", type=float, metavar="GB",
                   help="GB of activations a training pass may keep before recomputing them (trainer default "
                        "1.5, for a 16 GB laptop); more recomputes less where memory allows. Not part of a "
                        "stage's key: another machine's published stages still restore and resume")
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
    for name in ("demos", "rl_steps", "eval_limit", "retriever", "activation_budget"):
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
    if args.only and not any(name.startswith("compare") for name in args.only):
        print(f"\nrecipe done: ran {', '.join(args.only)}")
    else:
        print(f"\nrecipe done: the comparison is in {compare} (table.md, paired.md, metrics.png, funnel.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
