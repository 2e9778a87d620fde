"""Benchmark agent rollouts through the batched policy against bare batched ``generate``, in one run.

    python bench/rollout.py [--model smollm2-135m] [--n 8] [--max-turns 3] [--new-tokens 48]
                            [--small-corpus | --corpus DIR] [--threads T]

N Factbook questions ("What is the capital of X?", from the shipped task set) are run greedily

1. bare ``model.generate`` on one left-padded batch of the N first-turn prompts, same
   ``max_new_tokens`` (the reference: what the hardware does with this model and batch);
2. ``LocalPolicy.generate`` on the same batch (adds stop strings and log-probs; its decode loop
   computes the shared system prompt once and drops finished rows);
3. ``run_batch``: N concurrent trajectories through the LangGraph agent and ``BatchingPolicy``;
3b. the same with ``prefix_cache=False`` (every turn re-prefills the whole transcript with plain
   ``model.generate``): what the prefix KV cache buys;
3c. the batched run again with every thread keeping its OpenMP pool (``RESEARCH_AGENT_OMP_POOLS=keep``,
   what OpenMP does by default), alternating with 3 over ``--pool-rounds``: what ``corpus.openmp`` buys;
4. the same N trajectories one at a time through the unbatched ``LocalPolicy`` (what batching buys).
5. one row decoding alone (a straggler), float32 and ``--quantize int8`` policies alternating over
   ``--decode-rounds``, against the floor of streaming the weights once per token at the best read
   bandwidth measured in those rounds (the int8 row also against its own, smaller floor), and
   against the same decode with every step through ``model(...)`` instead of ``decode_step``;
5b. the int8 row decoding in ``BatchingPolicy``'s worker thread (where eval, serve and RL generate),
   pools released against kept, alternating over ``--decode-rounds``.

Throughput is generated (model) tokens per wall-clock second: tokens up to EOS for the bare
reference, ``sum(traj.generated_tokens)`` for the agent.  The agent's time includes prompt
prefills of later turns, stop-string checks and tool calls (search / open / find), which is the
point: the issue's goal is agent tok/s ≥ 0.8 × bare batched generate.

The machine is shared and noisy: read the figures as ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

TASKS = Path(__file__).resolve().parents[1] / "research_agent" / "data" / "factbook_qa.jsonl"


def capital_items(n: int) -> list[dict]:
    items = []
    with open(TASKS, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "capital":
                items.append(row)
            if len(items) == n:
                break
    if len(items) < n:
        raise SystemExit(f"only {len(items)} capital questions in {TASKS}")
    return items


def open_browser(args, items: list[dict], tmp: str):
    from corpus import open_corpus

    if args.corpus:
        return open_corpus(args.corpus)
    if not args.small_corpus:
        return open_corpus()
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    gecs = sorted({d.split("/", 1)[1] for it in items for d in it.get("supporting_docs", []) if d.startswith("factbook/")})
    gecs = sorted(set(gecs) | {"fr", "gm", "it", "sp"})
    out = Path(tmp) / "corpus"
    build_corpus(out=out, documents=list(factbook_documents(gecs=gecs)), progress=False)
    return open_corpus(out)


def bare_generate(model, tok, prompts: list[list[int]], max_new: int, eos_ids: set[int]) -> tuple[int, float]:
    import torch

    pad = tok.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new, do_sample=False,
                             temperature=None, top_p=None, top_k=None, pad_token_id=pad,
                             eos_token_id=sorted(eos_ids))
    secs = time.perf_counter() - t0
    tokens = 0
    for row in out[:, width:].tolist():
        n = 0
        for t in row:
            if t in eos_ids:
                break
            n += 1
        tokens += n
    return tokens, secs


def read_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second this machine reads from memory: the best of ``repeats`` sums over a buffer much
    larger than the caches, with torch's threads (what a decode step's weight reads can reach)."""
    import torch

    buf = torch.ones(int(gib * (1 << 30)) // 4, dtype=torch.float32)
    buf.sum()  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    return buf.numel() * 4 / best


def one_row_decode_ms(policy, prompt: list[int], short: int = 8, long: int = 72) -> tuple[float, int]:
    """Milliseconds per generated token of one row alone (a straggler's case): the difference of a
    long and a short greedy generation, so the prompt's prefill cancels out; and the tokens timed."""
    times, counts = [], []
    for n in (short, long):
        if policy.cache is not None:
            policy.cache.clear()
        t0 = time.perf_counter()
        g = policy.generate([prompt], max_new_tokens=n)[0]
        times.append(time.perf_counter() - t0)
        counts.append(len(g.token_ids))
    extra = counts[1] - counts[0]
    return (1000 * (times[1] - times[0]) / extra if extra > 0 else float("nan")), extra


def row(name: str, tokens: int, secs: float, extra: str = "") -> str:
    tps = tokens / secs if secs > 0 else float("nan")
    return f"  {name:<50} {tokens:>7} {secs:>9.2f} {tps:>9.1f}  {extra}"


def decode_figures(args, model, tok, local):
    """Section 5: one row decoding alone, against the floor of streaming every weight once per token."""
    from research_agent.inference.policy import LocalPolicy

    if args.skip_decode:
        return None
    count = tok.encode("Count from one to one hundred: one, two, three, four,")
    int8 = None
    if not args.skip_int8:
        from research_agent.inference.fast_linear import int8_available

        if int8_available():
            int8 = LocalPolicy(model, tok, name=args.model, quantize="int8")
            int8.generate([count], max_new_tokens=2)  # calibration, outside the timing
    f32_ms, int8_ms, via_model, bws = [], [], {"float32": [], "int8": []}, []
    no_kernels: dict[str, list[float]] = {"float32": [], "int8": []}
    for _ in range(max(1, args.decode_rounds)):  # alternating, so machine drift falls on all
        ms, timed = one_row_decode_ms(local, count)
        f32_ms.append(ms)
        if int8 is not None:
            int8_ms.append(one_row_decode_ms(int8, count)[0])
        for env, refs in (("RESEARCH_AGENT_FAST_DECODE", via_model), ("RESEARCH_AGENT_DECODE_KERNELS", no_kernels)):
            if args.skip_model_step:  # the references: each step through model(...); the lean step's torch ops
                break
            os.environ[env] = "0"
            try:
                refs["float32"].append(one_row_decode_ms(local, count)[0])
                if int8 is not None:
                    refs["int8"].append(one_row_decode_ms(int8, count)[0])
            finally:
                os.environ.pop(env, None)
        bws.append(read_bandwidth())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    if embed is not model.get_output_embeddings().weight:  # untied: a decode step reads one row of it
        weight_bytes -= embed.numel() * embed.element_size()
    bw = max(bws)  # the best read of every round: the tightest floor
    int8_bytes = None
    if int8 is not None:  # bytes per token through the int8 path: int8 copies + matrices kept float32
        kept = set(int8._decode._packed)
        int8_bytes = weight_bytes
        for m in model.modules():
            if id(m) in kept:
                w = m.base_layer.weight if hasattr(m, "base_layer") else m.weight
                int8_bytes -= w.numel() * (w.element_size() - 1)
    # the same bytes read again and again, as a decode reads its weights: where they fit in the
    # last-level cache (int8 on a CPU with a large L3), this is the floor that binds, not DRAM's
    sized = {"float32": read_bandwidth(weight_bytes / (1 << 30))}
    if int8_bytes is not None:
        sized["int8"] = read_bandwidth(int8_bytes / (1 << 30))
    return (sorted(f32_ms)[len(f32_ms) // 2], timed, weight_bytes, bw, 1000 * weight_bytes / bw,
            f32_ms, int8_ms, int8_bytes, via_model, bws, no_kernels, sized)


def worker_decode_figures(args, model, tok) -> dict[str, list[float]] | None:
    """Section 5b: one int8 row decoding in ``BatchingPolicy``'s worker, after the main thread has run
    torch work (as every caller has: it loaded the model), OpenMP pools released vs kept."""
    from research_agent.inference.fast_linear import int8_available
    from research_agent.inference.policy import BatchingPolicy, LocalPolicy

    if args.skip_decode or args.skip_pools or not int8_available():
        return None
    count = tok.encode("Count from one to one hundred: one, two, three, four,")
    int8 = LocalPolicy(model, tok, name=args.model, quantize="int8")
    int8.generate([count], max_new_tokens=2)
    figures: dict[str, list[float]] = {"release": [], "keep": []}
    try:
        for _ in range(max(1, args.decode_rounds)):
            for mode in figures:
                os.environ["RESEARCH_AGENT_OMP_POOLS"] = mode
                int8.generate([count], max_new_tokens=2)  # the main thread computes: it has a pool
                with BatchingPolicy(int8, max_batch=1) as worker:
                    worker.cache = int8.cache  # one_row_decode_ms clears it between its two runs
                    figures[mode].append(one_row_decode_ms(worker, count)[0])
    finally:
        os.environ.pop("RESEARCH_AGENT_OMP_POOLS", None)
    return figures


def decode_raw(decode, worker) -> dict | None:
    """Section 5 as raw numbers, round by round: each round's decodes beside that round's read bandwidth."""
    if decode is None:
        return None
    ms, timed, weight_bytes, bw, floor, f32_ms, int8_ms, int8_bytes, via_model, bws, no_kernels, sized = decode
    rounds = []
    for i, f32 in enumerate(f32_ms):
        rounds.append({"float32_ms": f32, "int8_ms": int8_ms[i] if i < len(int8_ms) else None,
                       "read_gbps": bws[i] / 1e9,
                       "model_step": {k: v[i] for k, v in via_model.items() if i < len(v)},
                       "torch_ops": {k: v[i] for k, v in no_kernels.items() if i < len(v)}})
    return {"tokens_timed": timed, "float32_bytes": weight_bytes, "int8_bytes": int8_bytes,
            "sized_read_gbps": {k: v / 1e9 for k, v in sized.items()}, "rounds": rounds, "worker_int8_ms": worker}


def print_worker_decode(figures) -> None:
    if not figures:
        return
    med = {k: sorted(v)[len(v) // 2] for k, v in figures.items()}
    print(f"  the int8 row in BatchingPolicy's worker thread: {med['release']:.1f} ms/token with OpenMP pools "
          f"released (median of {' / '.join(f'{x:.1f}' for x in figures['release'])}), {med['keep']:.1f} with "
          f"every thread keeping its pool (RESEARCH_AGENT_OMP_POOLS=keep; "
          f"{' / '.join(f'{x:.1f}' for x in figures['keep'])}): {med['keep'] / med['release']:.2f}x faster")


def print_decode(decode) -> None:
    if decode is None:
        return
    ms, timed, weight_bytes, bw, floor, f32_ms, int8_ms, int8_bytes, via_model, bws, no_kernels, sized = decode
    rounds = " / ".join(f"{x:.1f}" for x in f32_ms)
    print(f"\n  one row decoding alone: {ms:.1f} ms/token (median of {rounds}) over {timed} tokens; "
          f"weight-streaming floor {floor:.1f} ms/token ({weight_bytes / 1e6:.0f} MB of float32 weights read per "
          f"token at {bw / 1e9:.1f} GB/s, the best read bandwidth of the rounds: "
          f"{' / '.join(f'{b / 1e9:.1f}' for b in bws)}): {ms / floor:.2f}x the floor (goal <= 1.5x)")
    own_f32 = 1000 * weight_bytes / sized["float32"]
    print(f"  a buffer the weights' size ({weight_bytes / 1e6:.0f} MB) read again and again, as decode reads them: "
          f"{sized['float32'] / 1e9:.1f} GB/s, a floor of {own_f32:.1f} ms/token (float32 at {ms / own_f32:.2f}x)")
    what = {"model": "each step through model(...) instead (RESEARCH_AGENT_FAST_DECODE=0)",
            "ops": "the lean step on torch's ops, without the compiled kernels (RESEARCH_AGENT_DECODE_KERNELS=0)"}
    for ref_kind, refs in (("model", via_model), ("ops", no_kernels)):
        for kind, xs in refs.items():
            if xs:
                ref = sorted(xs)[len(xs) // 2]
                ours = ms if kind == "float32" else sorted(int8_ms)[len(int8_ms) // 2]
                print(f"  {kind}, {what[ref_kind]}: {ref:.1f} ms/token (median of "
                      f"{' / '.join(f'{x:.1f}' for x in xs)}); the default step is {ours / ref:.2f}x its time")
    if int8_ms:
        q = sorted(int8_ms)[len(int8_ms) // 2]
        own = 1000 * int8_bytes / bw
        print(f"  the same with --quantize int8: {q:.1f} ms/token (median of "
              f"{' / '.join(f'{x:.1f}' for x in int8_ms)}): {q / floor:.2f}x the float32 floor, "
              f"{q / own:.2f}x its own floor of {own:.1f} ms ({int8_bytes / 1e6:.0f} MB per token); "
              f"{ms / q:.2f}x faster than float32")
        cached = 1000 * int8_bytes / sized["int8"]
        print(f"  int8's {int8_bytes / 1e6:.0f} MB read again and again: {sized['int8'] / 1e9:.1f} GB/s (caches "
              f"included), a floor of {cached:.1f} ms/token: int8 at {q / cached:.2f}x")
    # the verdicts (and docs/benchmarks.md's table): each round's decode against its own bytes at that
    # round's read, the median of those ratios; not the best read, and int8 never against float32's bytes
    for kind, xs, nbytes in (("float32", f32_ms, weight_bytes), ("int8", int8_ms, int8_bytes)):
        if xs and nbytes:
            ratios = [x / (1000 * nbytes / b) for x, b in zip(xs, bws, strict=False)]
            med = statistics.median(ratios)
            print(f"  {kind} against its own floor, round by round: {' / '.join(f'{r:.2f}' for r in ratios)}x; "
                  f"median {med:.2f}x ({'meets' if med <= 1.5 else 'misses'} the goal of <= 1.5x)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m", help="named offline model, local path or hub id")
    p.add_argument("--n", type=int, default=8, help="trajectories (concurrent in the batched run)")
    p.add_argument("--max-turns", type=int, default=3, help="agent policy turns per trajectory")
    p.add_argument("--max-tool-calls", type=int, default=2, help="agent tool calls per trajectory")
    p.add_argument("--new-tokens", "--max-new-tokens", dest="new_tokens", type=int, default=48,
                   help="max new tokens per policy turn (and for the bare reference)")
    p.add_argument("--wait-s", type=float, default=0.05, help="BatchingPolicy wait for more requests")
    p.add_argument("--corpus", default=None, help="corpus index directory (default: the default corpus)")
    p.add_argument("--small-corpus", action="store_true",
                   help="build a tiny Factbook corpus (the questions' countries) in a temp dir instead")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--skip-sequential", action="store_true", help="skip the one-at-a-time run (the slowest)")
    p.add_argument("--skip-plain", action="store_true", help="skip the agent run without the prefix KV cache")
    p.add_argument("--skip-decode", action="store_true",
                   help="skip the one-row decode against the memory-bandwidth floor")
    p.add_argument("--decode-rounds", type=int, default=3,
                   help="one-row decode rounds, float32 and int8 weights alternating (medians reported)")
    p.add_argument("--skip-int8", action="store_true", help="one-row decode with float32 weights only")
    p.add_argument("--decode-only", action="store_true",
                   help="only the one-row decode (section 5), in a process that has run nothing else")
    p.add_argument("--pool-rounds", type=int, default=1,
                   help="batched agent runs with OpenMP pools released and kept, alternating (0: none kept)")
    p.add_argument("--skip-pools", action="store_true",
                   help="skip the references that keep every thread's OpenMP pool (3c, 5b)")
    p.add_argument("--skip-model-step", action="store_true",
                   help="skip the one-row references: each step through model(...), and the lean step without the compiled kernels")
    add_raw_flags(p)
    args = p.parse_args(argv)

    import torch

    from research_agent.agent import AgentConfig, ResearchAgent, run_batch
    from research_agent.inference.models import load_model
    from research_agent.inference.policy import BatchingPolicy, LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    items = capital_items(args.n)
    config = AgentConfig(max_turns=args.max_turns, max_tool_calls=args.max_tool_calls,
                         max_new_tokens=args.new_tokens, temperature=0.0)

    if args.decode_only:
        model, tok = load_model(args.model, progress=False)
        local = LocalPolicy(model, tok, name=args.model)
        local.generate([tok.encode("Hello")], max_new_tokens=2)
        print(f"One row decoding alone: {args.model}, torch threads {torch.get_num_threads()}, nothing else run")
        decode = decode_figures(args, model, tok, local)
        worker = worker_decode_figures(args, model, tok)
        print_decode(decode)
        print_worker_decode(worker)
        write_raw("rollout", args, {"decode": decode_raw(decode, worker)}, variant=args.model)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        t0 = time.perf_counter()
        browser = open_browser(args, items, tmp)
        model, tok = load_model(args.model, progress=False)
        local = LocalPolicy(model, tok, name=args.model)
        setup_s = time.perf_counter() - t0
        # warm up: first generate call and first search (embedder load) outside every timing
        browser.search("capital of France", k=1)
        local.generate([tok.encode("Hello")], max_new_tokens=2)

        first = [ResearchAgent(local, browser, config).new_trajectory(it["question"]).prompt_ids for it in items]

        # 1. the reference: bare batched generate
        bare_tok, bare_s = bare_generate(model, tok, first, args.new_tokens, local.eos_ids)

        # 2. LocalPolicy.generate on the same batch, with the agent's stop strings
        from research_agent import prompts

        t0 = time.perf_counter()
        gens = local.generate(first, max_new_tokens=args.new_tokens, temperature=0.0, stop=prompts.STOP_STRINGS)
        pol_s = time.perf_counter() - t0
        pol_tok = sum(len(g.token_ids) for g in gens)

        # 3. N concurrent trajectories through the batched policy; 3c. the same, every OpenMP pool kept
        def agent_run() -> tuple:
            local.cache.clear()  # nothing of an earlier run may help this one
            local.cache.hit_tokens = local.cache.fed_tokens = 0
            with BatchingPolicy(local, max_batch=args.n, wait_s=args.wait_s) as batched:
                t0 = time.perf_counter()
                trajs = run_batch(items, batched, browser, config, progress=False, concurrency=args.n)
                secs = time.perf_counter() - t0
            return trajs, secs, batched.calls, local.cache.hit_tokens, local.cache.fed_tokens

        pool_s: dict[str, list[float]] = {"release": [], "keep": []}
        same_tokens = True
        trajs, agent_s, calls, hit, fed = agent_run()
        pool_s["release"].append(agent_s)
        rounds = 0 if args.skip_pools else max(0, args.pool_rounds)
        try:
            for r in range(rounds):
                for mode in ("keep", "release") if r else ("keep",):
                    os.environ["RESEARCH_AGENT_OMP_POOLS"] = mode
                    local.generate([tok.encode("Hello")], max_new_tokens=2)  # the main thread computes
                    other = agent_run()
                    pool_s[mode].append(other[1])
                    same_tokens &= [t.token_ids for t in other[0]] == [t.token_ids for t in trajs]
        finally:
            os.environ.pop("RESEARCH_AGENT_OMP_POOLS", None)
        agent_s = sorted(pool_s["release"])[len(pool_s["release"]) // 2]
        agent_tok = sum(t.generated_tokens for t in trajs)
        turns = sum(t.turns for t in trajs)

        # 3b. the same without the prefix cache
        plain_tok, plain_s = 0, float("nan")
        if not args.skip_plain:
            plain = BatchingPolicy(LocalPolicy(model, tok, name=args.model, prefix_cache=False),
                                   max_batch=args.n, wait_s=args.wait_s)
            t0 = time.perf_counter()
            plain_trajs = run_batch(items, plain, browser, config, progress=False, concurrency=args.n)
            plain_s = time.perf_counter() - t0
            plain_tok = sum(t.generated_tokens for t in plain_trajs)

        # 4. the same trajectories one at a time, no batching
        seq_tok, seq_s, seq_turns = 0, float("nan"), 0
        if not args.skip_sequential:
            t0 = time.perf_counter()
            for it in items:
                b = browser.fork() if hasattr(browser, "fork") else browser
                t = ResearchAgent(local, b, config).run(it["question"], id=str(it.get("id", "")))
                seq_tok += t.generated_tokens
                seq_turns += t.turns
            seq_s = time.perf_counter() - t0

        # 5. one row decoding alone, against the floor of streaming every weight once per token
        decode = decode_figures(args, model, tok, local)
        worker_decode = worker_decode_figures(args, model, tok)

    n = args.n
    print(f"\nRollout throughput: {args.model}, {n} factbook capital questions, greedy, max_turns "
          f"{args.max_turns}, max_tool_calls {args.max_tool_calls}, max_new_tokens {args.new_tokens}/turn, "
          f"torch threads {torch.get_num_threads()}  (setup {setup_s:.1f} s, not timed)")
    print(f"  first-turn prompts: {min(map(len, first))}-{max(map(len, first))} tokens")
    print(f"  {'':<50} {'tokens':>7} {'wall s':>9} {'tok/s':>9}")
    print(row(f"bare model.generate, batch of {n} (reference)", bare_tok, bare_s, "1 call"))
    print(row(f"LocalPolicy.generate, batch of {n}, stop strings", pol_tok, pol_s, "1 call"))
    print(row(f"agent run_batch, {n} concurrent (BatchingPolicy)", agent_tok, agent_s,
              f"{turns} turns in {calls} calls (mean batch {turns / max(1, calls):.1f}); "
              f"prompt tokens from cache {hit}, prefilled {fed}"))
    if pool_s["keep"]:
        keep_s = sorted(pool_s["keep"])[len(pool_s["keep"]) // 2]
        print(row(f"agent run_batch, {n} concurrent, OpenMP pools kept", agent_tok, keep_s,
                  f"RESEARCH_AGENT_OMP_POOLS=keep; wall s {' / '.join(f'{x:.2f}' for x in pool_s['keep'])} "
                  f"against {' / '.join(f'{x:.2f}' for x in pool_s['release'])} released; "
                  f"{'identical' if same_tokens else 'DIFFERENT'} tokens"))
    if not args.skip_plain:
        print(row(f"agent run_batch, {n} concurrent, no prefix cache", plain_tok, plain_s,
                  "every turn re-prefills its transcript"))
    if not args.skip_sequential:
        print(row(f"agent, {n} trajectories one at a time", seq_tok, seq_s, f"{seq_turns} turns, batch 1"))
    bare_tps = bare_tok / bare_s if bare_s > 0 else float("nan")
    agent_tps = agent_tok / agent_s if agent_s > 0 else float("nan")
    ratio = agent_tps / bare_tps if bare_tps else float("nan")
    verdict = "meets" if ratio >= 0.8 else "below"
    print(f"\n  batched agent / bare batched generate: {ratio:.2f}x  ({verdict} the goal of >= 0.80x)")
    if not args.skip_sequential and seq_tok:
        print(f"  batched agent / one at a time:         {agent_tps / (seq_tok / seq_s):.2f}x  (what batching buys)")
    stops: dict[str, int] = {}
    for t in trajs:
        stops[t.stop_reason] = stops.get(t.stop_reason, 0) + 1
    print(f"  batched run stop reasons: {stops}")
    print_decode(decode)
    print_worker_decode(worker_decode)
    write_raw("rollout", args, {
        "agent": {"n": n, "max_turns": args.max_turns, "max_tool_calls": args.max_tool_calls,
                  "new_tokens": args.new_tokens, "bare_tokens": bare_tok, "bare_s": bare_s,
                  "policy_tokens": pol_tok, "policy_s": pol_s, "agent_tokens": agent_tok, "agent_s": agent_s,
                  "agent_s_rounds": pool_s["release"], "pools_kept_s": pool_s["keep"], "same_tokens": same_tokens,
                  "turns": turns, "calls": calls, "cache_hit_tokens": hit, "cache_fed_tokens": fed,
                  "plain_tokens": plain_tok, "plain_s": plain_s, "sequential_tokens": seq_tok,
                  "sequential_s": seq_s, "stop_reasons": stops},
        "decode": decode_raw(decode, worker_decode)}, variant=f"{args.model}-agent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
