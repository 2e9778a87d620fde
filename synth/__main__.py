"""``python -m synth qa | trajectories | sft-export``: QA pairs, teacher trajectories, SFT data."""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# the agent flags of `synth trajectories` (all other AgentConfig fields: --set, --config); a teacher
# samples (temperature 0.7, the seed's rollout temperature) so --samples N gives N different episodes
SYNTH_FLAGS = ("context", "max_turns", "max_tool_calls", "max_new_tokens", "template", "temperature",
               "context_tokens")
SYNTH_DEFAULTS = {"temperature": 0.7}


def cmd_qa(args) -> int:
    from corpus import open_corpus
    from corpus.files import seeded_subset

    from .qa import QASynthesizer, read_jsonl, write_jsonl

    browser = open_corpus(args.corpus)
    docs = list(browser.documents())
    exclude = []
    for path in args.exclude or []:
        exclude += read_jsonl(path)
    synth = QASynthesizer(docs, browser.chunks, seed=args.seed)
    items, stats = synth.generate(multi_hop=not args.single_hop_only, exclude=exclude)
    if args.per_kind:
        counts: dict[str, int] = {}
        balanced = []
        for it in items:
            if counts.get(it.kind, 0) < args.per_kind:
                balanced.append(it)
                counts[it.kind] = counts.get(it.kind, 0) + 1
        items = balanced
    if args.limit is not None:
        items = seeded_subset(items, args.limit, args.seed)
    write_jsonl(args.out, items)
    for w in stats["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    stats["written"] = len(items)
    stats["written_splits"] = {s: sum(1 for i in items if i.split == s) for s in ("train", "dev", "test")}
    print(json.dumps(stats, indent=1))
    return 0


def cmd_trajectories(args) -> int:
    from research_agent.store import StoreError

    try:
        return _trajectories(args)
    except StoreError as e:  # another run writes to the same --out (it would duplicate every record), or a corrupt shard
        print(f"error: {e}", file=sys.stderr)
        return 2


def _trajectories(args) -> int:
    from corpus.factbook import hops, ill_posed
    from corpus.files import seeded_subset
    from research_agent.agent import AgentConfig
    from research_agent.configs import ConfigError, config_from_args
    from research_agent.inference.devices import DeviceError, use_device
    from research_agent.inference.policy import load_policy

    from .qa import read_jsonl
    from .trajectories import output_lock, synthesize_trajectories

    try:
        cfg = config_from_args(args, AgentConfig, defaults=SYNTH_DEFAULTS, flags=SYNTH_FLAGS)
        if args.policy == "model" and not args.endpoint:
            use_device(args.device, args.dtype)
    except (ConfigError, DeviceError) as e:  # before a model or a corpus is loaded
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.adapter and (args.policy != "model" or args.endpoint):
        print("error: --adapter goes on a local --policy model (an endpoint serves its own adapters)", file=sys.stderr)
        return 2
    with output_lock(args.out):  # fail fast, before a model or a corpus is loaded
        pass
    items = [it for it in read_jsonl(args.qa, split=args.split or None)
             if not ill_posed(it) and hops(it) >= args.min_hops]
    if args.limit is not None:
        items = seeded_subset(items, args.limit, args.seed)
    from corpus import open_browser

    browser = open_browser(corpus=args.corpus, retrieval_url=args.retrieval_url, retriever=args.retriever)
    if args.policy == "reference":
        from transformers import AutoTokenizer

        from research_agent.inference.models import resolve_model_dir

        from .reference import ReferencePolicy

        wanted = {d for it in items for d in it.get("supporting_docs") or []}
        docs = browser.documents() if hasattr(browser, "documents") else ()  # a retrieval server lists none
        names = {d.id: d.meta.get("country") or d.title for d in docs if d.id in wanted}
        policy = ReferencePolicy(AutoTokenizer.from_pretrained(resolve_model_dir(args.model)), items, names=names,
                                 state_bridges=args.state_bridges)
    else:
        policy = load_policy(args.model, adapter=args.adapter, endpoint=args.endpoint, device=args.device,
                             dtype=args.dtype)
    stats = synthesize_trajectories(items, policy, browser, args.out, samples=args.samples, config=cfg,
                                    concurrency=args.concurrency)
    if args.memory:
        from research_agent.memory import CaseMemory

        from .trajectories import load_trajectories

        memory = CaseMemory(args.memory)
        stats["memory_new_cases"] = memory.add_trajectories(load_trajectories(args.out), min_f1=args.memory_min_f1,
                                                            source=str(args.out))
        stats["memory_cases"] = len(memory)
    print(json.dumps(stats))
    return 0


def cmd_sft_export(args) -> int:
    from transformers import AutoTokenizer

    from research_agent.inference.models import resolve_model_dir

    from .trajectories import export_sft, filter_trajectories, load_trajectories

    try:  # before any shard is read
        tok = AutoTokenizer.from_pretrained(resolve_model_dir(args.tokenizer))
    except (OSError, ValueError) as e:
        print(f"error: cannot load the tokenizer of {args.tokenizer!r} ({e}); name the student model, "
              "a local model directory or a cached hub id", file=sys.stderr)
        return 2
    trajs = [t for d in args.trajectories for t in load_trajectories(d)]
    kept, stats = filter_trajectories(trajs, min_reward=args.min_f1, confidence_keep=args.confidence_keep,
                                      require_support=args.require_citations, per_kind=args.per_kind,
                                      seed=args.seed)
    stats["exported"] = export_sft(kept, args.out, tokenizer=tok, tokenizer_name=args.tokenizer)
    print(json.dumps(stats))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from corpus.local import add_retriever_flag

    p = argparse.ArgumentParser(prog="python -m synth", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("qa", help="synthesize verified QA pairs (single- and multi-hop) from a corpus")
    q.add_argument("--corpus", default=None, help="corpus directory (default: the embedded corpus)")
    q.add_argument("--out", required=True)
    q.add_argument("--per-kind", type=int, default=None, help="at most N questions of each kind (balance)")
    q.add_argument("--limit", type=int, default=None, help="a seeded random subset of N questions")
    q.add_argument("--single-hop-only", action="store_true")
    q.add_argument("--exclude", nargs="*", help="evaluation JSONL files whose questions/answers must not leak")
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(fn=cmd_qa)
    t = sub.add_parser("trajectories", help="run the agent with a teacher model over QA pairs (resumable)")
    t.add_argument("--qa", required=True)
    t.add_argument("--out", required=True, help="directory of JSONL shards")
    t.add_argument("--model", default="qwen2.5-coder-0.5b")
    t.add_argument("--endpoint", default=None, help="OpenAI-compatible server for the teacher")
    t.add_argument("--adapter", default=None,
                   help="a LoRA adapter on --model: a trained student sampling its own runs (a later round of "
                        "rejection sampling)")
    t.add_argument("--policy", choices=["model", "reference"], default="model",
                   help="model: a teacher model; reference: gold-path demonstrations over real tool results "
                        "(--model then only names the tokenizer)")
    t.add_argument("--state-bridges", action="store_true",
                   help="reference policy: write each two-hop bridge in a <think> before the turn that uses it "
                        "(\"<think>Russia borders both.</think>\"), so the student learns to name it")
    t.add_argument("--corpus", default=None)
    t.add_argument("--retrieval-url", default=None)
    add_retriever_flag(t)
    t.add_argument("--split", default="train")
    t.add_argument("--limit", type=int, default=None,
                   help="a seeded random subset of N questions (same seed: smaller subsets are prefixes)")
    t.add_argument("--seed", type=int, default=0, help="seed of the --limit subset")
    t.add_argument("--samples", type=int, default=1, help="trajectories per question")
    t.add_argument("--min-hops", type=int, default=1,
                   help="only questions of at least N hops (e.g. 2: the two-hop questions)")
    from research_agent.agent import AgentConfig
    from research_agent.configs import add_config_flags

    add_config_flags(t, AgentConfig, flags=SYNTH_FLAGS, defaults=SYNTH_DEFAULTS)
    from research_agent.inference.devices import add_device_flags

    add_device_flags(t)
    t.add_argument("--concurrency", type=int, default=8)
    t.add_argument("--memory", default=None, metavar="DIR",
                   help="add the written trajectories to this case memory (B6); a run is a success by its gold")
    t.add_argument("--memory-min-f1", type=float, default=0.8, help="token F1 at or above which a case is a success")
    t.set_defaults(fn=cmd_trajectories)
    s = sub.add_parser("sft-export", help="filter trajectories and write SFT data (text turns, the student's "
                                          "token ids, chat messages)")
    s.add_argument("--trajectories", required=True, nargs="+",
                   help="directories of shards (e.g. reference demonstrations and the student's own samples)")
    s.add_argument("--out", required=True)
    s.add_argument("--tokenizer", default="smollm2-135m", metavar="MODEL",
                   help="the student whose tokenizer renders the token ids (a named model, a directory or a hub id); "
                        "the teacher's may differ")
    s.add_argument("--min-f1", type=float, default=0.8)
    s.add_argument("--confidence-keep", type=float, default=None,
                   help="keep this share of the most confident trajectories (DeepConf lowest-group)")
    s.add_argument("--require-citations", action="store_true",
                   help="keep only trajectories whose cited chunks were retrieved and support the answer "
                        "(rejection sampling: right and checked, not right by luck)")
    s.add_argument("--per-kind", type=int, default=None,
                   help="at most N trajectories of each question kind and source directory (seeded)")
    s.add_argument("--seed", type=int, default=0, help="seed of the --per-kind draw")
    s.set_defaults(fn=cmd_sft_export)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
