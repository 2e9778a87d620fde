"""The check to run on a new GPU machine: one SFT step and two RL steps, end to end, on the device.

    python bench/gpu_check.py [--model qwen2.5-coder-0.5b] [--device cuda] [--dtype auto] [--out DIR]

What it runs, each through the project's own command in this process (as the recipe does), so the
device, dtype and every tensor path of the real trainer are exercised:

1. a small real corpus: the Factbook profiles the chosen training questions need, plus four more
   (hybrid search; ``--bm25-only`` leaves out the dense index, for a machine without the embedder);
2. gold-path demonstrations of ``--demos`` training questions (``synth trajectories --policy
   reference``, real tool calls on that corpus) and their SFT export, tokenized for ``--model``;
3. SFT on them: ``--demos`` / 4 steps of micro-batch 4 (one step with the default 4);
4. RL from that adapter: ``--rl-steps`` (3) REINFORCE steps of 2 prompts x G=4, 4 turns, 3 tool
   calls, 48 tokens per turn, temperature 1.0, group filters off so each step updates;
5. the reference, in the same process on the same device: bare batched HF ``generate`` (the RL
   adapter on, left padded, sampled at temperature 1.0, the same 48-token cap) of the rows the RL
   steps start from, the opening prompt of each trajectory, timed after one warm-up call.

It prints the device (name, capability, bf16), each stage's wall time, SFT s/step and trained tokens/s,
RL s/step (rollout and update) and generated tokens/s, the reference's tokens/s and the ratio, and
the peak GPU memory torch allocated; and writes them to ``OUT/gpu_check.json``.  Token counts are
the run's own (each step's ``rollout_generated_tokens``), and the first RL step, which loads and
warms up, is left out of the per-step figures when more than one ran. On a machine without CUDA, ``--device cpu`` runs the same
path (slowly) as a dry run of the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EXTRA_GECS = ["fr", "gm", "it", "sp"]


def pick_questions(n: int) -> list[dict]:
    """The first ``n`` training questions answered by one or two Factbook profiles (small corpus)."""
    from research_agent.tasks import default_task_file

    out = []
    with open(default_task_file(), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs = row.get("supporting_docs") or []
            if row.get("split") == "train" and 0 < len(docs) <= 2 and all(d.startswith("factbook/") for d in docs):
                out.append(row)
            if len(out) == n:
                break
    return out


def device_line(device: str) -> dict:
    import peft
    import torch
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "device": device}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False)")
        idx = torch.device(device).index or 0
        info.update(gpu=torch.cuda.get_device_name(idx), capability=".".join(map(str, torch.cuda.get_device_capability(idx))),
                    bf16=torch.cuda.is_bf16_supported(), cuda=torch.version.cuda)
    return info


def run(module: str, argv: list[str]) -> float:
    import importlib

    print(f"\n== python -m {module.removesuffix('.__main__')} {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    rc = importlib.import_module(module).main(argv)
    if rc not in (0, None):
        raise SystemExit(f"{module} failed with exit status {rc}")
    return time.perf_counter() - t0


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def timed_steps(rows: list[dict]) -> list[dict]:
    """The RL steps the per-step figures average: all but the first (load, allocation, warm-up)."""
    return rows[1:] if len(rows) > 1 else rows


def bare_generate_reference(model: str, adapter: Path, questions: list[dict], n_rows: int, new_tokens: int,
                            device: str, dtype: str, rounds: int = 2) -> dict:
    """Bare batched ``generate`` of the opening prompts of ``n_rows`` agent rows (questions repeated
    as the RL groups repeat them), each round after one warm-up call: the reference the rollout's
    tokens/s is read against."""
    import torch

    from research_agent import prompts
    from research_agent.inference.adapters import load_adapter
    from research_agent.inference.models import load_model
    from research_agent.loop import chat_prompt_ids

    net, tok = load_model(model, device=device, dtype=dtype, progress=False)
    net = load_adapter(net, str(adapter))
    net.eval()
    rows = [chat_prompt_ids(tok, prompts.messages(questions[i % len(questions)]["question"], "fast", ""), 3072,
                            "the question") for i in range(n_rows)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=net.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=net.device)
    eos = {tok.eos_token_id, *([net.generation_config.eos_token_id] if isinstance(
        net.generation_config.eos_token_id, int) else (net.generation_config.eos_token_id or []))} - {None}

    def once() -> tuple[int, float]:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = net.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
                               temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        made = 0
        for row in out[:, width:].tolist():  # a row's tokens up to and with its first EOS
            made += next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        return made, seconds

    once()  # warm-up
    runs = [once() for _ in range(rounds)]
    return {"rows": n_rows, "new_tokens": new_tokens, "rounds": [{"tokens": t, "seconds": round(s, 3)} for t, s in runs],
            "tokens_per_s": round(sum(t for t, _ in runs) / max(sum(s for _, s in runs), 1e-9), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for a dry run of this script")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--demos", type=int, default=4, help="demonstrations (SFT steps = demos / 4)")
    ap.add_argument("--rl-steps", type=int, default=3, help="RL steps (the first is left out of the per-step figures)")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    ap.add_argument("--bm25-only", action="store_true",
                    help="build the corpus without its dense index: search is BM25 and no embedder is needed "
                         "(for a machine the embedder package cannot be installed on)")
    args = ap.parse_args()
    import torch

    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    info = device_line(args.device)
    print(json.dumps(info), flush=True)
    os.environ.setdefault("RESEARCH_AGENT_EMBED_DEVICE", args.device)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    questions = pick_questions(max(args.demos, 2))
    tasks = out / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    gecs = sorted({d.split("/", 1)[1] for q in questions for d in q["supporting_docs"]} | set(EXTRA_GECS))
    t0 = time.perf_counter()
    corpus = out / "corpus"
    if not (corpus / "manifest.json").exists():
        build_corpus(out=corpus, documents=list(factbook_documents(gecs=gecs)), progress=False,
                     dense=not args.bm25_only, dense_later=False)  # BM25-only: nothing embeds beside the run
    times = {"corpus_s": time.perf_counter() - t0}
    dev = ["--device", args.device, "--dtype", args.dtype]
    agent = ["--max-turns", "4", "--max-tool-calls", "3", "--max-new-tokens", "48"]
    times["demonstrations_s"] = run("synth.__main__", [
        "trajectories", "--qa", str(tasks), "--policy", "reference", "--model", args.model, "--split", "train",
        "--limit", str(args.demos), "--corpus", str(corpus), "--out", str(out / "demos"), "--concurrency", "4",
        *agent, *dev])
    times["sft_export_s"] = run("synth.__main__", [
        "sft-export", "--trajectories", str(out / "demos"), "--out", str(out / "sft.jsonl"), "--min-f1", "0",
        "--tokenizer", args.model])
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    times["sft_s"] = run("research_agent.train.__main__", [
        "--stage", "sft", "--model", args.model, "--tasks", str(out / "sft.jsonl"), "--epochs", "1",
        "--micro-batch", "4", "--lr", "5e-4", "--out", str(out / "sft"), *dev])
    sft_peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    times["rl_s"] = run("research_agent.train.__main__", [
        "--stage", "rl", "--model", args.model, "--init-adapter", str(out / "sft" / "adapter"), "--tasks",
        str(tasks), "--corpus", str(corpus), "--algorithm", "reinforce", "--group-size", "4",
        "--prompts-per-step", "2", "--steps", str(args.rl_steps), "--lr", "2e-4", "--kl-coef", "0", "--temperature", "1.0",
        "--filter-low", "0", "--filter-high", "1", "--filter-zero-variance", "false", "--drop-void-turns", "false",
        "--checkpoint-every", "1000", "--out", str(out / "rl"), *agent, *dev])
    rl_peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    sft_rows, rl_rows = rows(out / "sft" / "metrics.jsonl"), rows(out / "rl" / "metrics.jsonl")
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
        **info, "model": args.model, "dtype": args.dtype, "retriever": "bm25" if args.bm25_only else "hybrid",
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
        "sft_peak_gpu_gb": round(sft_peak, 2) if sft_peak is not None else None,
        "rl_peak_gpu_gb": round(rl_peak, 2) if rl_peak is not None else None,
    }
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("\nRESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
