"""``python -m eval qa | compare | checkpoints`` (and ``code``, ``docs-hits``: the code agent's own parsers).

  python -m eval qa --bench squad-open --limit 200 --model qwen2.5-coder-0.5b --out runs/base
  python -m eval qa --bench synth/heldout.jsonl --model smollm2-135m --adapter runs/rl/checkpoints/step-200 --out runs/rl
  python -m eval compare runs/base runs/sft runs/rl --out runs/compare
  python -m eval checkpoints runs/train-rl --bench squad-open --limit 50 --out runs/train-rl/heldout
  python -m eval code --tasks humaneval --mode all --model qwen2.5-coder-0.5b --out runs/code   # see eval/code.py
  python -m eval docs-hits --tasks dataframebench:test --out runs/docs-hits.json   # the API search, measured

Agent settings are the fields of ``AgentConfig``; set any of them with ``--set name=value``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corpus.files import content_hash
from eval.benchmarks import BenchmarkFormatError, UnknownBenchmark, format_hint, load_benchmark
from eval.drain import EvalStopped
from eval.rundir import RunDirError
from research_agent.configs import ConfigError, add_config_flags, config_from_args
from research_agent.inference.devices import DeviceError, add_device_flags, use_device


def agent_config(args: argparse.Namespace, shipped: dict | None = None) -> Any:
    """AgentConfig from a shipped agent's settings, ``--config``, ``--set`` and the common flags, each
    value parsed as its field's type."""
    from research_agent.agent import AgentConfig

    try:
        return config_from_args(args, AgentConfig, defaults=shipped)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def _add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bench",
        required=True,
        help="benchmark name (squad-open, strategyqa, simpleqa, factbook-test, factbook-dev) or a JSONL file",
    )
    p.add_argument(
        "--bench-file",
        default=None,
        help="a local file in the named benchmark's format, instead of the packaged one",
    )
    p.add_argument("--limit", type=int, default=None, help="evaluate a seeded random subset of N questions")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the subset (same seed: smaller subsets are prefixes)"
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="corpus index directory (default: the benchmark's own or the default corpus)",
    )
    from corpus.local import add_retriever_flag

    add_retriever_flag(p)
    from research_agent.agent import AgentConfig

    add_config_flags(p, AgentConfig)
    add_device_flags(p, quantize=True)
    p.add_argument(
        "--concurrency", type=int, default=8, help="trajectories in flight at once (batched policy)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    qa = sub.add_parser("qa", help="evaluate a policy on a QA benchmark")
    _add_bench_args(qa)
    qa.add_argument("--model", default=None, help="model name, HF id or local path (default qwen2.5-coder-0.5b)")
    qa.add_argument("--adapter", default=None, help="LoRA adapter directory")
    qa.add_argument("--agent", default=None, metavar="NAME",
                    help="a shipped trained agent (artifacts/NAME: its model, adapter and budgets)")
    qa.add_argument("--endpoint", default=None, help="OpenAI-compatible server URL instead of a local model")
    qa.add_argument("--out", required=True, help="run directory (an interrupted run there is resumed)")
    qa.add_argument(
        "--memory",
        default=None,
        metavar="DIR",
        help="case memory (B6) whose similar successful cases guide each question; fill it from the "
        "training split only (python -m research_agent.memory add)",
    )
    qa.add_argument("--memory-k", type=int, default=2, help="successful past cases shown per question")
    qa.add_argument("--drain-s", type=float, default=None, metavar="SECONDS",
                    help="after a first Ctrl-C/SIGTERM, finish the questions in flight for at most this long "
                    "(default: all of them); a second signal stops at once")
    qa.add_argument(
        "--memory-add",
        action="store_true",
        help="after the run, add its trajectories to --memory (do this for training-split runs only)",
    )

    cmp = sub.add_parser("compare", help="table and plots over finished runs")
    cmp.add_argument("runs", nargs="+", help="run directories written by `python -m eval qa`")
    cmp.add_argument("--out", default=None, help="where table.md and the PNGs go (default: runs/compare)")
    cmp.add_argument("--allow-mixed-code", action="store_true",
                     help="compare a run whose answers come from more than one version of the code (a resumed "
                     "eval); refused without it, flagged in the tables with it")

    ck = sub.add_parser("checkpoints", help="reward-hacking check over a training run's checkpoints")
    ck.add_argument("train_dir", help="training run directory (metrics.jsonl, checkpoints/step-N/)")
    _add_bench_args(ck)
    ck.add_argument(
        "--model",
        default=None,
        help="base model (default: the training run's config, else qwen2.5-coder-0.5b)",
    )
    ck.add_argument("--metric", default="f1", help="held-out metric to watch")
    ck.add_argument("--out", default=None, help="output directory (default: TRAIN_DIR/heldout)")
    return parser


def _load_items(args: argparse.Namespace):
    return load_benchmark(args.bench, limit=args.limit, seed=args.seed, path=args.bench_file)


def _run_info(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "limit": args.limit,
        "seed": args.seed,
        "bench_file": args.bench_file,
        "retriever": args.retriever,
        "corpus_path": args.corpus,
        # only when set: runs made before the flag existed resume under the same identity
        **({"quantize": args.quantize} if getattr(args, "quantize", "none") != "none" else {}),
    }


def open_memory(args: argparse.Namespace, items: list[dict]):
    """The case memory of ``--memory``, after warning about benchmark questions already in it.

    Such cases are never shown for their own question (``CaseMemory.retrieve`` skips them), but
    their presence means the memory was filled from the evaluation split.
    """
    if not args.memory:
        if args.memory_add:
            raise SystemExit("--memory-add needs --memory DIR")
        return None
    from research_agent.memory import CaseMemory
    from rewards.text import normalize_answer

    memory = CaseMemory(args.memory)
    stored = {normalize_answer(c.question) for c in memory.cases()}
    overlap = sum(normalize_answer(str(it["question"])) in stored for it in items)
    if overlap:
        print(
            f"warning: {overlap} of {len(items)} questions are already in the memory {args.memory}; they never "
            "see their own case, but an evaluation memory should hold the training split only",
            file=sys.stderr,
        )
    return memory


def item_guidance(memory: Any, k: int) -> Callable[[dict], str]:
    """Text before each question: retrieved past cases (B6), then the answer-format hint of its type."""

    def guidance(item: dict) -> str:
        parts = [memory.guidance(item["question"], k=k) if memory is not None else "", format_hint(item)]
        return "\n\n".join(p for p in parts if p)

    return guidance


def cmd_qa(args: argparse.Namespace) -> int:
    from eval.corpora import open_benchmark_corpus
    from eval.runner import evaluate
    from research_agent.inference.models import DEFAULT_MODEL
    from research_agent.inference.policy import load_policy
    from research_agent.shipped import UnknownAgent, apply_agent
    from research_agent.tasks import ResearchTasks

    if args.drain_s is not None and args.drain_s < 0:
        print("error: --drain-s must be at least 0", file=sys.stderr)
        return 2
    try:
        shipped = apply_agent(args)
    except UnknownAgent as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.model = args.model or DEFAULT_MODEL
    items, spec = _load_items(args)
    config = agent_config(args, shipped)
    if not args.endpoint:
        use_device(args.device, args.dtype)
    browser = open_benchmark_corpus(spec, args.corpus, retriever=args.retriever, progress=not args.quiet)
    policy = load_policy(args.model, adapter=args.adapter, endpoint=args.endpoint, device=args.device,
                         dtype=args.dtype, quantize=args.quantize)
    info = {"bench": args.bench, "corpus": spec.to_dict(), **_run_info(args), "model": args.model,
            "adapter": args.adapter, "endpoint": args.endpoint}
    if args.adapter and Path(args.adapter).is_dir():  # what the adapter is, wherever it lies
        info["adapter_sha256"] = content_hash(Path(args.adapter))
    memory = open_memory(args, items)
    if memory is not None:
        info.update(memory=str(memory.path.resolve()), memory_k=args.memory_k)
    if any(format_hint(it) for it in items):
        info["format_hints"] = True
    results = evaluate(ResearchTasks(guidance=item_guidance(memory, args.memory_k)), items, policy, args.out,
                       config=config, browser=browser, run_info=info, progress=not args.quiet,
                       concurrency=args.concurrency, drain_s=args.drain_s)
    if memory is not None and args.memory_add:
        from eval.runner import load_run_trajectories

        added = memory.add_trajectories(load_run_trajectories(args.out), source=str(args.out))
        print(f"added {added} new cases to {memory.path} ({len(memory)} in all)", file=sys.stderr)
    print(json.dumps(results["metrics"], indent=2))
    print(f"results: {Path(args.out) / 'results.json'}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from eval.compare import compare_runs

    out = Path(args.out) if args.out else Path("runs") / "compare"
    print(compare_runs(args.runs, out, allow_mixed_code=args.allow_mixed_code))
    print(f"table and plots: {out}/table.md, metrics.png, funnel.png", file=sys.stderr)
    return 0


def _training_model(train_dir: Path) -> str:
    for name in ("config.json", "train_config.json", "run.json"):
        path = train_dir / name
        if path.exists():
            try:
                model = json.loads(path.read_text(encoding="utf-8")).get("model")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(model, str) and model:
                return model
    return "qwen2.5-coder-0.5b"


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from eval.checkpoints import check_checkpoints
    from eval.corpora import open_benchmark_corpus
    from research_agent.inference.policy import load_policy

    train_dir = Path(args.train_dir)
    items, spec = _load_items(args)
    config = agent_config(args)
    use_device(args.device, args.dtype)
    browser = open_benchmark_corpus(spec, args.corpus, retriever=args.retriever, progress=not args.quiet)
    model = args.model or _training_model(train_dir)
    out = Path(args.out) if args.out else train_dir / "heldout"
    report = check_checkpoints(
        train_dir,
        items,
        browser,
        config,
        out,
        model=model,
        bench=args.bench,
        corpus=spec,
        metric=args.metric,
        run_info=_run_info(args),
        progress=not args.quiet,
        load_policy=functools.partial(load_policy, device=args.device, dtype=args.dtype,
                                      quantize=getattr(args, "quantize", "none")),
    )
    for row in report["checkpoints"]:
        print(
            f"step {row['step']:>6}  train reward {row['train_reward']:.3f}  "
            f"held-out {args.metric} {row['heldout']:.3f}"
        )
    for _, msg in report["alarms"]:
        print(f"ALARM {msg}")
    print(f"plot: {out / 'reward_vs_heldout.png'}", file=sys.stderr)
    return 1 if report["hacking_suspected"] else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["code"]:  # the code-agent eval has its own parser (eval/code.py)
        from eval.code import main as code_main

        return code_main(argv[1:])
    if argv[:1] == ["docs-hits"]:  # the code agent's docs search, measured (eval/docs_hits.py)
        from eval.docs_hits import main as docs_hits_main

        return docs_hits_main(argv[1:])
    args = build_parser().parse_args(argv)
    commands = {"qa": cmd_qa, "compare": cmd_compare, "checkpoints": cmd_checkpoints}
    try:
        return commands[args.command](args)
    except (UnknownBenchmark, BenchmarkFormatError, RunDirError, DeviceError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except EvalStopped as e:  # a first Ctrl-C/SIGTERM: what finished is saved (qa, and checkpoints' evals)
        print(str(e), file=sys.stderr)
        return 130


__all__ = ["main", "build_parser", "agent_config"]
