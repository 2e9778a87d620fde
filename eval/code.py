"""G2 for code tasks: pass@1 of the code agent in seed 004's three tool settings, and the bar plot.

  python -m eval code --tasks dataframebench:test --mode all --model qwen2.5-coder-0.5b --limit 100 --out runs/code-base
  python -m eval code --tasks dataframebench:test --mode multi-tool --adapter runs/rl/final --out runs/code-rl
  python -m eval code ... --mode all --rl-run runs/code-rl --out runs/code-base   # adds the "after RL" bar
  python -m eval code --compare base=runs/code-base sft=runs/code-sft rl=runs/code-rl --out runs/cmp
  python -m eval code --rescore --out runs/code-base   # re-test saved submissions after a scorer change

Each mode runs greedily into OUT/<mode>/ (run.json, trajectories.jsonl appended as tasks finish,
results.json), so an interrupted run resumes task by task. A first Ctrl-C (or SIGTERM) starts no more
tasks and finishes and saves those in flight; a second one, or the end of --drain-s, aborts them.
OUT/results.json holds every mode's metrics, OUT/table.md the comparison table and OUT/pass_at_1.png
the seed's bar plot. All JSON and Markdown files are written atomically.

This module is the command line; the work is done in eval/code_modes.py (running the modes through
eval/runner.py), eval/code_metrics.py, eval/code_report.py (table, plot, summary, --compare) and
eval/code_rescore.py (--rescore).

The multi-tool docs come from an API-docs corpus built once from the installed libraries
(``research_agent.code.apidocs.api_docs_browser``, shared with the trainer) under
``<cache>/corpora/api-docs-v3``, or from ``--docs DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from corpus.files import content_hash, seeded_subset
from eval.code_modes import evaluate_code
from eval.code_report import PLOT, TABLE, compare_code_runs, rl_result
from eval.code_rescore import rescore
from eval.drain import EvalStopped
from eval.rundir import RESULTS, RunDirError
from research_agent.code.agent import CodeAgentConfig
from research_agent.code.apidocs import api_docs_browser
from research_agent.code.env import MODES
from research_agent.code.sandbox import SandboxError, require_contained
from research_agent.configs import ConfigError, add_config_flags, config_from_args
from research_agent.inference.devices import DeviceError, add_device_flags, use_device


def code_config(args: argparse.Namespace) -> CodeAgentConfig:
    """CodeAgentConfig from ``--config``, ``--set`` and the common flags (the mode is --mode)."""
    try:
        return config_from_args(args, CodeAgentConfig, reserved={"mode": "--mode"})
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eval code", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--tasks",
        default="dataframebench:test",
        help="dataframebench:train|val|test, humaneval, kodcode:PATH.jsonl, bigcodebench:PATH.jsonl",
    )
    p.add_argument(
        "--mode", default="all", choices=[*MODES, "all"], help="tool setting (all: the three baselines)"
    )
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="model name, HF id or local path")
    p.add_argument("--adapter", default=None, help="LoRA adapter directory (e.g. after RL)")
    p.add_argument("--endpoint", default=None, help="OpenAI-compatible server URL instead of a local model")
    p.add_argument("--limit", type=int, default=None,
                   help="a seeded random subset of N tasks (same seed: smaller subsets are prefixes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --limit subset")
    p.add_argument(
        "--ids",
        default=None,
        help="comma-separated task ids (DFB/B0013 or B0013): only these, e.g. to re-run the tasks a "
        "change is about; applied after --limit",
    )
    p.add_argument("--out", required=True, help="output directory (an interrupted run there is resumed)")
    p.add_argument("--rl-run", default=None, help="an `eval code --adapter` output: adds the after-RL bar")
    p.add_argument("--corpus", "--docs", dest="docs", default=None,
                   help="API-docs corpus directory (default: the cached one)")
    p.add_argument(
        "--docs-modules",
        default=None,
        help="comma-separated modules to document when the docs corpus is built (default: all)",
    )
    from corpus.local import RETRIEVER_HELP, add_retriever_flag

    add_retriever_flag(p, help=RETRIEVER_HELP + " (the API-docs search)")
    add_config_flags(p, CodeAgentConfig)
    add_device_flags(p, quantize=True)
    p.add_argument("--allow-unsafe-sandbox", action="store_true",
                   help="run model-written code even where the sandbox cannot contain it (docs/security.md); "
                        "without it, an uncontained level is refused before anything runs")
    p.add_argument(
        "--concurrency", type=int, default=8, help="trajectories in flight at once (batched policy)"
    )
    p.add_argument(
        "--rescore",
        action="store_true",
        help="re-run the tests of the final submissions already in --out under the current scorer "
        "(after installing a library or a scorer fix); generates nothing",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        default=None,
        metavar="[LABEL=]RESULTS",
        help="no generation: tabulate and plot finished results (an --out directory or a results.json, "
        "one mode's included) into --out/table.md and pass_at_1.png",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--drain-s", type=float, default=None, metavar="SECONDS",
                   help="after a first Ctrl-C/SIGTERM, finish the tasks in flight for at most this long, then "
                   "stop without them (they rerun on resume); default: wait for all (a scheduler's grace "
                   "period wants less)")
    return p


def select_ids(tasks: list, ids: str | None) -> list:
    """The tasks named in ``ids`` (full ids or the part after the source's ``/``), in task order."""
    if not ids:
        return tasks
    wanted = [w.strip() for w in ids.split(",") if w.strip()]
    by_name = {}
    for t in tasks:
        by_name[t.id] = t
        by_name.setdefault(t.id.rsplit("/", 1)[-1], t)
    missing = [w for w in wanted if w not in by_name]
    if missing:
        raise ValueError(f"task ids not among the loaded tasks: {', '.join(missing)}")
    chosen = {by_name[w].id for w in wanted}
    return [t for t in tasks if t.id in chosen]


def main(argv: list[str] | None = None) -> int:
    from corpus.store import CorpusError
    from research_agent.code.tasks import TaskSourceError, load_tasks

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.drain_s is not None and args.drain_s < 0:
        parser.error("--drain-s must be at least 0")
    modes = list(MODES) if args.mode == "all" else [args.mode]
    try:
        if not args.compare:  # everything else runs model-written code: refuse an uncontained sandbox
            level = require_contained(args.allow_unsafe_sandbox)
            if not args.quiet:
                print(f"code sandbox: {level}", file=sys.stderr)
        if args.rescore:
            summary = rescore(args.out, progress=not args.quiet)
            print(summary["table"])
            return 0
        if args.compare:
            print(compare_code_runs(args.compare, args.out))
            print(f"results: {Path(args.out) / TABLE}, {Path(args.out) / PLOT}", file=sys.stderr)
            return 0
        config = code_config(args)
        if not args.endpoint:
            use_device(args.device, args.dtype)
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be at least 1")
        tasks = load_tasks(args.tasks)
        if args.limit is not None:
            tasks = seeded_subset(tasks, args.limit, args.seed)
        tasks = select_ids(tasks, args.ids)
        if not tasks:
            raise ValueError(f"{args.tasks} has no tasks")
        if args.rl_run:
            rl_result(args.rl_run)
        docs = None
        if "multi-tool" in modes:
            modules = (
                [m.strip() for m in args.docs_modules.split(",") if m.strip()] if args.docs_modules else None
            )
            docs = api_docs_browser(args.docs, modules, retriever=args.retriever, progress=not args.quiet)
        from research_agent.inference.policy import load_policy

        policy = load_policy(args.model, adapter=args.adapter, endpoint=args.endpoint, progress=not args.quiet,
                             device=args.device, dtype=args.dtype, quantize=args.quantize)
        info = {
            "tasks": args.tasks,
            "limit": args.limit,
            **({"seed": args.seed} if args.limit is not None else {}),
            **({"ids": [t.id for t in tasks]} if args.ids else {}),
            "model": args.model,
            "adapter": args.adapter,
            "endpoint": args.endpoint,
            "docs": str(getattr(docs, "path", "")) if docs else None,
            **({"quantize": args.quantize} if args.quantize != "none" else {}),
        }
        if args.adapter and Path(args.adapter).is_dir():  # what the adapter is, wherever it lies
            info["adapter_sha256"] = content_hash(Path(args.adapter))
        summary = evaluate_code(tasks, policy, docs, modes, args.out, config=config, run_info=info,
                                rl_run=args.rl_run, progress=not args.quiet, concurrency=args.concurrency,
                                drain_s=args.drain_s)
    except EvalStopped as e:
        print(str(e), file=sys.stderr)
        return 130
    except (RunDirError, TaskSourceError, CorpusError, ValueError, DeviceError, FileNotFoundError, SandboxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary["table"])
    print(json.dumps({m: v.get("pass_at_1") for m, v in summary["modes"].items()}))
    print(
        f"results: {Path(args.out) / RESULTS}, {Path(args.out) / TABLE}, {Path(args.out) / PLOT}",
        file=sys.stderr,
    )
    return 0


__all__ = ["build_parser", "code_config", "main", "select_ids"]
