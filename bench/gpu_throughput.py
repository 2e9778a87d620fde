"""``python bench/gpu_check.py --throughput``: rollout throughput at N concurrent agent rows against bare
batched ``generate`` of the same rows, in one process, after a warm-up of each.

The rollout is what an RL step's rollout is: ``rows / G`` training questions, each G times, run as
concurrent trajectories through the agent loop and ``BatchingPolicy`` over ``LocalPolicy`` (on CUDA its
static decoder: slots in a preallocated KV cache, one CUDA graph a step), a fresh LoRA on q/v as the
trainer's (r16, α32), sampled at temperature 1.0, with real searches on a Factbook corpus built for the
questions.  Its figure is generated tokens (``sum(traj.generated_tokens)``) per wall-clock second, tool
calls and later turns' prefills included.  The reference is transformers' batched ``generate`` (the
same model and LoRA, left padded, sampled at temperature 1.0 with the same new-token cap) of the same
rows' opening prompts, counting each row's tokens up to and with its first EOS.  The two alternate over
``rounds``, each round's ratio taken within the round; the figures are the medians.
"""

from __future__ import annotations

import statistics
import time

from bench.gpu_machine import (
    LOOP_MODULES,
    BusySampler,
    busy_reader,
    device_line,
    engine,
    peak_gb,
    pick_retriever,
    place_model,
    require_modules,
    reset_peak,
)

# issue 53's targets at 64 concurrent rows on one GPU: generated tokens/s, and the ratio to bare generate
TARGET_TOKENS_PER_S = {"smollm2-135m": 2000.0, "qwen2.5-coder-0.5b": 1000.0}
TARGET_RATIO = 2.0


def rollout_items(questions: list[dict], group_size: int) -> list[dict]:
    """Each question ``group_size`` times, ids naming question and sample (as an RL step draws them)."""
    return [{**q, "id": f"{q.get('id', i)}::g{g}"} for i, q in enumerate(questions) for g in range(group_size)]


def with_lora(model):
    """``model`` under a fresh LoRA as the RL trainer makes it (its defaults: r, alpha, q/v targets)."""
    from peft import LoraConfig, get_peft_model

    from research_agent.train.config import TrainConfig

    d = TrainConfig()
    return get_peft_model(model, LoraConfig(r=d.lora_r, lora_alpha=d.lora_alpha, lora_dropout=0.0,
                                            target_modules=list(d.lora_targets), task_type="CAUSAL_LM"))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def opening_prompts(tok, questions: list[str], template: str, max_total_tokens: int) -> list[list[int]]:
    e = engine()
    return [e.chat_prompt_ids(tok, e.prompts.messages(q, template, ""), max_total_tokens, "the question")
            for q in questions]


def bare_generate(net, tok, prompts: list[list[int]], new_tokens: int, eos: set[int], device: str) -> tuple[int, float]:
    """One batched ``generate`` of ``prompts`` (left padded, sampled at temperature 1.0): (tokens made up to
    and with each row's first EOS, seconds)."""
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else min(eos)
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in prompts], device=net.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in prompts], device=net.device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = net.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True,
                           temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad, eos_token_id=sorted(eos))
    _sync(device)
    seconds = time.perf_counter() - t0
    made = sum(next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in out[:, width:].tolist())
    return made, seconds


def rollout(policy, browser, items: list[dict], config, device: str) -> tuple[int, float, list]:
    """One round of concurrent trajectories: (generated tokens, seconds, trajectories)."""
    from research_agent.agent import run_batch

    _sync(device)
    t0 = time.perf_counter()
    trajs = run_batch(items, policy, browser, config, progress=False, concurrency=len(items))
    _sync(device)
    return sum(t.generated_tokens for t in trajs), time.perf_counter() - t0, trajs


def side(tokens: int, seconds: float, busy: BusySampler) -> dict:
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / max(seconds, 1e-9), 1),
            "gpu_busy_pct": busy.percent()}


def verdict(model: str, device: str, rows: int, tokens_per_s: float, ratio: float) -> dict:
    """The issue's targets and whether this run met them (None where they do not apply: not CUDA, not 64 rows)."""
    target = TARGET_TOKENS_PER_S.get(model)
    applies = device.startswith("cuda") and rows == 64 and target is not None
    return {"tokens_per_s": target, "ratio": TARGET_RATIO,
            "met": (tokens_per_s >= target and ratio >= TARGET_RATIO) if applies else None}


def run_throughput(args) -> dict:
    """The rollout and the bare reference, alternating over ``args.rounds`` after one warm-up each."""
    import torch

    from bench.gpu_recipe import build_factbook_corpus, pick_questions, profiles_for
    from corpus import open_corpus
    from research_agent.agent import AgentConfig

    require_modules(LOOP_MODULES)
    found = place_model(args.model, args.model_dir)
    if found == "gguf":
        from bench.gpu_machine import GGUF_MODULES

        require_modules(GGUF_MODULES)
    info = device_line(args.device)
    retriever, why = pick_retriever(args.retriever)
    if args.rows % args.group_size:
        raise SystemExit(f"error: --rows {args.rows} is not a multiple of --group-size {args.group_size}")
    questions = pick_questions(args.rows // args.group_size)
    items = rollout_items(questions, args.group_size)
    corpus = args.work / "corpus"
    if not (corpus / "manifest.json").exists():
        build_factbook_corpus(corpus, profiles_for(questions), retriever)
    browser = open_corpus(corpus, retriever=retriever)
    e = engine()
    t0 = time.perf_counter()
    base, tok = e.load_model(args.model, device=args.device, dtype=args.dtype, progress=False)
    net = with_lora(base)
    net.eval()
    load_s = time.perf_counter() - t0
    policy = e.LocalPolicy(net, tok, name=f"{args.model}+lora", decode=args.decode)
    config = AgentConfig(max_turns=args.max_turns, max_tool_calls=args.max_tool_calls, max_new_tokens=args.new_tokens,
                         max_total_tokens=args.max_total_tokens, temperature=1.0)
    prompts = opening_prompts(tok, [it["question"] for it in items], config.template, config.max_total_tokens)
    read = busy_reader(args.device)
    print(f"== {len(items)} rows ({len(questions)} questions x G{args.group_size}), decode "
          f"{'static' if policy.static_decoder() is not None else 'loop'}, {retriever}", flush=True)
    warm = {}
    torch.manual_seed(0)
    warm["rollout_s"] = round(rollout(policy, browser, items, config, args.device)[1], 2)
    warm["bare_s"] = round(bare_generate(net, tok, prompts, args.new_tokens, policy.eos_ids, args.device)[1], 2)
    reset_peak(args.device)
    rounds = []
    for r in range(args.rounds):
        torch.manual_seed(1 + r)
        with BusySampler(read) as busy:
            made, secs, trajs = rollout(policy, browser, items, config, args.device)
        ours = {**side(made, secs, busy), "turns_per_row": round(statistics.mean(len(t.steps) for t in trajs), 2)}
        torch.manual_seed(1 + r)
        with BusySampler(read) as busy:
            bare = side(*bare_generate(net, tok, prompts, args.new_tokens, policy.eos_ids, args.device), busy)
        rounds.append({"rollout": ours, "bare_generate": bare,
                       "ratio": round(ours["tokens_per_s"] / max(bare["tokens_per_s"], 1e-9), 2)})
        print(f"   round {r + 1}: rollout {ours['tokens_per_s']} tok/s ({made} tokens, {secs:.2f} s), bare generate "
              f"{bare['tokens_per_s']} tok/s: {rounds[-1]['ratio']}x", flush=True)
    med = lambda xs: round(statistics.median(xs), 2)  # noqa: E731
    tps = med([x["rollout"]["tokens_per_s"] for x in rounds])
    ratio = med([x["ratio"] for x in rounds])
    dec = policy.static_decoder()
    return {**info, "mode": "throughput", "model": args.model, "weights": found, "dtype": args.dtype,
            "decode": "static" if dec is not None else "loop", "retriever": retriever, "retriever_note": why,
            "rows": len(items), "group_size": args.group_size, "new_tokens": args.new_tokens,
            "agent": {"max_turns": args.max_turns, "max_tool_calls": args.max_tool_calls,
                      "max_total_tokens": args.max_total_tokens, "temperature": 1.0},
            "load_s": round(load_s, 1), "warmup": warm, "rounds": rounds,
            "rollout_tokens_per_s": tps, "bare_generate_tokens_per_s": med([x["bare_generate"]["tokens_per_s"] for x in rounds]),
            "ratio": ratio, "gpu_busy_pct": med([x["rollout"]["gpu_busy_pct"] for x in rounds])
            if all(x["rollout"]["gpu_busy_pct"] is not None for x in rounds) else None,
            "static_decoder": {"steps": dec.steps, "syncs": dec.syncs, "captures": dec.captures} if dec else None,
            "peak_gpu_gb": peak_gb(args.device),
            "target": verdict(args.model, args.device, len(items), tps, ratio)}
