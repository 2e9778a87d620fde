"""``python -m research_agent.ask "question"``: answer with citations, streaming each step.

Works on a fresh machine with no flags: the default corpus and model are built/fetched on first
use (with progress) and cached.  The model is fetched and converted in a thread while the corpus's
chunks and BM25 index are built; the first answer comes from BM25 while the dense index builds in
the background (later runs use hybrid search).  A first run ends with the time each first-use
stage took, on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

STARTED = time.perf_counter()  # "time to first answer" counts from here (the install excluded)

from .configs import COMMON_FLAGS, add_config_flags  # noqa: E402  (light: argparse and tomllib only)

ASK_FLAGS = (*COMMON_FLAGS, "template", "context_tokens")
# ask checks citations by meaning too: one question, so the embedding cost is small
ASK_DEFAULTS = {"semantic_citations": True}

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research_agent.ask", description=__doc__)
    p.add_argument("question")
    p.add_argument("--backend", choices=["local", "live"], default="local",
                   help="local corpus (default, offline) or the live web (Tavily; needs TAVILY_API_KEY)")
    p.add_argument("--corpus", default=None, help="corpus index directory (default: the embedded corpus)")
    p.add_argument("--retrieval-url", default=None, help="use a retrieval service (python -m corpus serve) by URL")
    p.add_argument("--model", default=None, help="named offline model, local path or hub id "
                                                  "(default qwen2.5-coder-0.5b)")
    p.add_argument("--adapter", default=None, help="LoRA adapter directory (e.g. from training)")
    p.add_argument("--agent", default=None, metavar="NAME",
                   help="a shipped trained agent (artifacts/NAME: its model, adapter and budgets), e.g. "
                        "research-qwen-v1")
    p.add_argument("--endpoint", default=None, help="OpenAI-compatible server URL instead of a local model")
    from .agent import AgentConfig

    add_config_flags(p, AgentConfig, flags=ASK_FLAGS, defaults=ASK_DEFAULTS)
    from .inference.devices import add_device_flags

    add_device_flags(p, quantize=True)
    p.add_argument("--record", default=None, help="live backend: record every response to this directory")
    p.add_argument("--replay", default=None, help="live backend: serve responses from a recording, offline")
    p.add_argument("--json", action="store_true", help="print the whole trajectory as JSON")
    p.add_argument("--trace", default=None, help="write an HTML trace of the research to this file")
    p.add_argument("--quiet", action="store_true", help="do not stream steps")
    p.add_argument("--memory", default=None, metavar="DIR",
                   help="case memory: similar past runs guide this one, and this run is added to it")
    p.add_argument("--memory-k", type=int, default=2, help="successful past cases shown as guidance")
    p.add_argument("--report", action="store_true",
                   help="treat QUESTION as a topic and write a structured Markdown report with citations")
    p.add_argument("--sections", type=int, default=3, help="report mode: section questions to research (2-4)")
    p.add_argument("--write-tokens", type=int, default=120, help="report mode: tokens of prose per section")
    p.add_argument("--out", default=None, help="report mode: also write the Markdown report to this file")
    return p


def make_browser(args):
    from corpus import open_browser

    return open_browser(args.backend, corpus=args.corpus, retrieval_url=args.retrieval_url, record_dir=args.record,
                        replay_dir=args.replay)


def stream_step(out):
    def show(traj, step):
        if step.action == "answer":
            return
        arg = f" {step.argument}" if step.argument else ""
        print(f"▶ {step.action}{arg}", file=out, flush=True)
        if step.error:
            print(f"  ! {step.error}", file=out, flush=True)
        if step.info.get("notes"):
            print(f"  ✎ {' '.join(step.info['notes'].split())[:160]}", file=out, flush=True)
        body = step.observation.strip().removeprefix("<result>").removesuffix("</result>").strip()
        for line in body.splitlines()[:6]:
            print(f"  {line[:160]}", file=out, flush=True)
    return show



def agent_config(args, shipped: dict | None = None):
    from .agent import AgentConfig
    from .configs import ConfigError, config_from_args

    try:
        return config_from_args(args, AgentConfig, defaults={**ASK_DEFAULTS, **(shipped or {})}, flags=ASK_FLAGS)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from corpus.browser import BrowserError

    from .agent import ResearchAgent
    from .inference.models import DEFAULT_MODEL
    from .inference.policy import PolicyError

    if not args.question.strip():
        print("error: the question is empty", file=sys.stderr)
        return 2
    from .shipped import UnknownAgent, apply_agent

    try:
        shipped = apply_agent(args)
    except UnknownAgent as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = args.model or DEFAULT_MODEL
    stages: dict[str, str] = {}
    try:
        config = agent_config(args, shipped)
        if not args.endpoint:  # a device that is not there fails before the corpus or the model is built
            from .inference.devices import use_device

            use_device(args.device, args.dtype)
        browser, policy = prepare(args, model, stages)
        out = sys.stderr if args.json else sys.stdout
        on_step = None if args.quiet else stream_step(out)
        if args.report:
            code = run_report(args, policy, browser, config, on_step)
            print_first_use(stages)
            return code
        memory = open_memory(args.memory)
        guidance = memory.guidance(args.question, k=args.memory_k) if memory else ""
        traj = ResearchAgent(policy, browser, config, on_step=on_step).run(args.question, guidance=guidance)
        if memory is not None:
            traj.meta["memory"] = {"dir": str(memory.path), "guidance": guidance,
                                   "added": memory.add_trajectories([traj])}
    except (BrowserError, PolicyError, ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.trace:
        from .trace import write_trace

        write_trace(traj, args.trace)
    if args.json:
        print(json.dumps(traj.to_dict(), ensure_ascii=False, indent=1))
    else:
        print_answer(traj)
    print_first_use(stages)
    return 0 if traj.answered else 3


def prepare(args, model: str, stages: dict[str, str]):
    """The browser and the policy; on a first run the model is fetched and converted in a thread
    while the default corpus is built, and ``stages`` gets the time each first-use stage took."""
    from corpus import default_corpus_dir
    from corpus.store import MANIFEST

    from .inference.models import ModelFetch, is_ready
    from .inference.policy import load_policy

    fetch = None if is_ready(model) else ModelFetch(model)
    first_corpus = (args.backend == "local" and not args.corpus and not args.retrieval_url
                    and not (default_corpus_dir() / MANIFEST).exists())
    t0 = time.perf_counter()
    browser = make_browser(args)
    if first_corpus:
        stages["default corpus: chunks + BM25 index"] = f"{time.perf_counter() - t0:.1f} s"
    if fetch is not None:
        seconds = fetch.wait()
        stages[f"model {model}: fetch + convert"] = (
            f"{seconds:.1f} s" + (" (alongside the corpus build)" if first_corpus else ""))
    policy = load_policy(model, adapter=args.adapter, endpoint=args.endpoint, device=args.device, dtype=args.dtype,
                         quantize=args.quantize)
    return browser, policy


def print_first_use(stages: dict[str, str]) -> None:
    """On a first run, the time each first-use stage took (stderr, so --json output stays JSON)."""
    if not stages:
        return
    stages["time to first answer (from the start of ask)"] = f"{time.perf_counter() - STARTED:.1f} s"
    width = max(map(len, stages))
    print("first-use stages (install excluded):", file=sys.stderr)
    for name, took in stages.items():
        print(f"  {name:<{width}}  {took}", file=sys.stderr, flush=True)


def open_memory(path: str | None):
    if not path:
        return None
    from .memory import CaseMemory

    return CaseMemory(path)


def run_report(args, policy, browser, config, on_step) -> int:
    """Report mode: plan, research and write; score with the C9 report reward; print or save."""
    from corpus.files import atomic_write_text

    from .report import ReportConfig, score_report, write_report

    cfg = ReportConfig(sections=args.sections, write_tokens=args.write_tokens)
    report = write_report(args.question, policy, browser, config, cfg, on_step=on_step)
    report.meta["score"] = score_report(report, cfg)
    if args.out:
        atomic_write_text(args.out, report.markdown)
    if args.trace:
        from .trace import write_report_trace

        write_report_trace(report, args.trace)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=1))
    else:
        score = report.meta["score"]
        print(f"\n{report.markdown}")
        print("Report reward: " + ", ".join(f"{k} {v:.2f}" for k, v in score.items()))
    return 0


def print_answer(traj) -> None:
    if not traj.answered:
        print(f"\nNo answer ({traj.stop_reason}) after {traj.turns} turns.")
        return
    print(f"\nAnswer: {traj.answer}")
    info = traj.steps[-1].info
    for claim, ok in info.get("supported", {}).items():
        if not ok:
            print(f"  (not supported by its citations: {claim})")
    if traj.citations:
        print("Sources:")
        for cid in traj.citations:
            text = traj.retrieved.get(cid)
            if text is None:
                print(f"  [{cid}] — never retrieved: this citation is not backed by anything the agent read")
            else:
                print(f"  [{cid}] {' '.join(text.split())[:150]}")
    else:
        print("  (no citations given)")


if __name__ == "__main__":
    sys.exit(main())
