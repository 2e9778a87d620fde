"""docs/benchmarks.md's "latest figures" table, made from the raw bench outputs in docs/results/bench/.

    python bench/table.py            # rewrite the table in docs/benchmarks.md
    python bench/table.py --check    # exit 1 if the table is not what the files give (the test suite runs this)

Each row comes from the newest raw file of one (bench, variant) — a bench's ``write_raw`` output —
and nothing else: a figure is the median over the run's rounds with the range of the rounds beside
it, never the best round; a ratio is the median of the rounds' ratios (each taken within one round,
where a slow spell of a shared machine falls on both sides); a goal is judged on that median and the
table says "met" or "missed".  A raw file of a bench with no row function here is an error: add one
to ``ROWS`` rather than a hand-written row in the document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RAW_DIR = ROOT / "docs" / "results" / "bench"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN = ("<!-- latest figures: made by `python bench/table.py` from docs/results/bench/*.json "
         "(the newest file of each bench and variant); edit those files or the script, not this table -->")
END = "<!-- end of latest figures -->"
HEADER = ("| benchmark (work) | figure: median of rounds (range) | reference in the same run | ratio: median of the "
          "rounds' ratios (range) | goal | run |\n|---|---|---|---|---|---|")
Row = tuple[str, str, str, str, str]  # benchmark, figure, reference, ratio, goal (the run column is added)


class TableError(ValueError):
    """The raw files cannot make the table (an unknown bench, a malformed file)."""


# ---- numbers -------------------------------------------------------------------------------------
def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], fmt: str = ".2f", unit: str = "") -> str:
    """``median unit (min–max)``, or the one value where there is one."""
    if not xs:
        return "—"
    m = f"{median(xs):{fmt}}{unit}"
    lo, hi = f"{min(xs):{fmt}}", f"{max(xs):{fmt}}"
    return m if lo == hi else f"{m} ({lo}–{hi})"


def goal(value: float, bound: float, *, at_most: bool = True, unit: str = "×") -> str:
    ok = value <= bound if at_most else value >= bound
    return f"{'≤' if at_most else '≥'} {bound:g}{unit}: **{'met' if ok else 'missed'}**"


def after_first(xs: list[float]) -> list[float]:
    """The steps after the first (the first holds the warm-up), or the one step there is."""
    return xs[1:] if len(xs) > 1 else xs


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ---- one function per bench: a raw record -> its rows ---------------------------------------------
def agent_step_rows(raw: dict[str, Any]) -> list[Row]:
    w = raw["work"]
    rounds = [r for r in raw["rounds"] if r.get("ours") and r.get("trl")]
    if not rounds:
        raise TableError("agent_step: no round with both sides")

    def side(r: dict, key: str) -> float:
        return mean(after_first([s[key] for s in r["steps"]]))

    s = {k: [side(r[k], "s") for r in rounds] for k in ("ours", "trl")}
    tok = {k: [side(r[k], "gen_tokens") for r in rounds] for k in ("ours", "trl")}
    calls = {k: [side(r[k], "tool_calls") for r in rounds] for k in ("ours", "trl")}
    per_tok = {k: [a / b for a, b in zip(s[k], tok[k], strict=True)] for k in s}
    ratio = [a / b for a, b in zip(s["ours"], s["trl"], strict=True)]
    tok_ratio = [a / b for a, b in zip(per_tok["ours"], per_tok["trl"], strict=True)]
    rss = {k: [r[k]["peak_rss_mb"] / 1024 for r in rounds] for k in s}
    steps = len(rounds[0]["ours"]["steps"])
    stop = "each turn ends at the action's closing tag on both sides" if w["trl_stop_strings"] else \
        "TRL's turns without stop strings (not equal work)"
    bench = (f"`bench/agent_step.py` ({raw['variant']} + LoRA r{w['lora']['r']}, {w['questions']} Factbook questions "
             f"× G{w['group']}, ≤ {w['tool_calls']} tool calls, {w['turns']} turns × {w['turn_tokens']} tokens; "
             f"{stop}; {steps} steps a side, steps 2–{steps} timed)")
    figure = (f"ours {spread(s['ours'], '.1f', ' s/step')}, {spread(per_tok['ours'], '.3f', ' s/token')}; "
              f"{spread(tok['ours'], '.0f')} generated tokens and {spread(calls['ours'], '.1f')} tool calls a step; "
              f"peak RSS {spread(rss['ours'], '.1f', ' GB')}")
    reference = (f"TRL {raw['versions'].get('trl', '?')} `GRPOTrainer` + `environment_factory`: "
                 f"{spread(s['trl'], '.1f', ' s/step')}, {spread(per_tok['trl'], '.3f', ' s/token')}; "
                 f"{spread(tok['trl'], '.0f')} tokens and {spread(calls['trl'], '.1f')} tool calls a step; "
                 f"peak RSS {spread(rss['trl'], '.1f', ' GB')}")
    ratios = f"**{spread(ratio, '.2f', '×')}** per step; {spread(tok_ratio, '.2f', '×')} per generated token"
    return [(bench, figure, reference, ratios, goal(median(ratio), 0.5) + " (per step)")]


def train_step_rows(raw: dict[str, Any]) -> list[Row]:
    rounds = [r for r in raw["rounds"] if r.get("ours") and r.get("trl")]
    if not rounds:
        raise TableError("train_step: no round with both sides")
    s = {k: [mean(after_first(r[k]["times"])) for r in rounds] for k in ("ours", "trl")}
    gen = [mean(after_first(r["ours"]["gen_times"])) for r in rounds]
    rss = {k: [r[k]["peak_rss_mb"] / 1024 for r in rounds] for k in s}
    ratio = [a / b for a, b in zip(s["ours"], s["trl"], strict=True)]
    a = raw["args"]
    bench = (f"`bench/train_step.py` ({a['model']} + LoRA r16, 2 prompts × G4, {a['new_tokens']} new tokens, single "
             f"turn; {a['steps']} steps a side, steps 2–{a['steps']} timed)")
    figure = (f"ours {spread(s['ours'], '.2f', ' s/step')} (generation {spread(gen, '.2f', ' s')}); peak RSS "
              f"{spread(rss['ours'], '.2f', ' GB')}")
    reference = (f"TRL {raw['versions'].get('trl', '?')} `GRPOTrainer` {spread(s['trl'], '.2f', ' s/step')}; "
                 f"peak RSS {spread(rss['trl'], '.2f', ' GB')}")
    return [(bench, figure, reference, f"**{spread(ratio, '.2f', '×')}**", goal(median(ratio), 0.5))]


def rollout_rows(raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    model = raw["args"]["model"]
    agent = raw.get("agent")
    if agent:
        tps = agent["agent_tokens"] / agent["agent_s"]
        bare = agent["bare_tokens"] / agent["bare_s"]
        rows.append((f"`bench/rollout.py` ({model}, {agent['n']} agent trajectories through `BatchingPolicy`, "
                     f"greedy, {agent['max_turns']} turns × {agent['new_tokens']} tokens)",
                     f"{tps:.1f} generated tok/s ({agent['agent_tokens']} tokens in {agent['agent_s']:.2f} s)",
                     f"bare batched `generate` {bare:.1f} tok/s", f"**{tps / bare:.2f}×** (one run)",
                     goal(tps / bare, 0.8, at_most=False)))
    d = raw.get("decode")
    if d:
        n = len(d["rounds"])
        for kind, key, nbytes in (("float32", "float32_ms", d["float32_bytes"]), ("int8", "int8_ms", d.get("int8_bytes"))):
            ms = [r[key] for r in d["rounds"] if r.get(key) is not None]
            if not ms or not nbytes:
                continue
            floors = [1000 * nbytes / (r["read_gbps"] * 1e9) for r in d["rounds"] if r.get(key) is not None]
            ratio = [m / f for m, f in zip(ms, floors, strict=True)]
            gbps = [r["read_gbps"] for r in d["rounds"]]
            via_model = [r["model_step"][kind] for r in d["rounds"] if r.get("model_step", {}).get(kind) is not None]
            ref = (f"its floor: {nbytes / 1e6:.0f} MB of {kind} weights a token at each round's read "
                   f"({spread(gbps, '.1f', ' GB/s')}): {spread(floors, '.1f', ' ms')}")
            if via_model:
                ref += f"; each step through `model(...)`: {spread(via_model, '.1f', ' ms')}"
            where = ("`bench/rollout.py` (inside the full bench, after the agent runs; " if agent else
                     "`bench/rollout.py --decode-only` (")
            rows.append((f"{where}one row decoding alone, {model}, {kind} weights, {n} alternating rounds)",
                         f"{spread(ms, '.1f', ' ms/token')}", ref, f"**{spread(ratio, '.2f', '×')}** its floor",
                         goal(median(ratio), 1.5) + " (median)"))
    if not rows:
        raise TableError("rollout: neither an agent run nor a decode in the file")
    return rows


def sandbox_rows(raw: dict[str, Any]) -> list[Row]:
    rounds = raw["rounds"]
    s = [1000 * median(r["sandboxed_s"]) for r in rounds]
    b = [1000 * median(r["bare_s"]) for r in rounds]
    ratio = [x / y for x, y in zip(s, b, strict=True)]
    n = len(rounds[0]["bare_s"])
    return [(f"`bench/sandbox.py` (a trivial program; {len(rounds)} rounds of {n} runs each, interleaved; isolation "
             f"{raw['isolation']})", f"`run_python` {spread(s, '.1f', ' ms')}", f"bare `python -c` {spread(b, '.1f', ' ms')}",
             f"**{spread(ratio, '.2f', '×')}**", "—")]


def service_rows(raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    rounds = raw["rounds"]
    for clients in raw["clients"]:
        key = str(clients)
        svc = [r["service"][key] for r in rounds]
        loc = [r["in-process"][key] for r in rounds]
        lat = [a["p50_ms"] / b["p50_ms"] for a, b in zip(svc, loc, strict=True)]
        qps = [a["qps"] / b["qps"] for a, b in zip(svc, loc, strict=True)]
        rows.append((f"`bench/service.py` (retrieval service on loopback, {raw['variant']}, {clients} client"
                     f"{'s' if clients > 1 else ''}, {raw['corpus']}; {len(rounds)} rounds)",
                     f"{spread([m['p50_ms'] for m in svc], '.1f', ' ms')} p50, {spread([m['qps'] for m in svc], '.0f')} QPS",
                     f"in-process `LocalBrowser` {spread([m['p50_ms'] for m in loc], '.1f', ' ms')} p50, "
                     f"{spread([m['qps'] for m in loc], '.0f')} QPS",
                     f"**{spread(lat, '.2f', '×')}** latency; {spread(qps, '.2f', '×')} QPS", "—"))
    return rows


def corpus_rows(raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    c = raw["corpus"]
    where = f"{raw['variant']} corpus, {c['documents']:,} documents"
    if raw.get("build"):
        b = raw["build"]
        n = b["chunks"]
        ours = [n / x for x in b["build_s"]]
        bare = [n / x for x in b["bare_s"]]
        ratio = [x / y for x, y in zip(ours, bare, strict=True)]
        cos = f"; cosine to bare encode's vectors ≥ {b['cosine_min']:.5f}" if b.get("cosine_min") is not None else ""
        rows.append((f"`bench/corpus.py` build ({b['documents']} documents of the {where}, {n} chunks; "
                     f"{len(ratio)} alternating rounds)", f"`build_corpus` {spread(ours, '.1f', ' chunks/s')} "
                     f"({b['dtype']})", f"bare `SentenceTransformer.encode` {spread(bare, '.1f', ' chunks/s')} "
                     f"(float32)", f"**{spread(ratio, '.2f', '×')}**{cos}", "—"))
    if raw.get("search"):
        t = raw["search"]["seconds"]
        p50 = {k: 1000 * median(v) for k, v in t.items()}
        bare = 1000 * median([a + b for a, b in zip(t["encode"], t["faiss"], strict=True)])
        q = raw["search"]["queries"]
        rows.append((f"`bench/corpus.py` search ({where}; {q} queries, k={raw['search']['k']}, the paths "
                     "interleaved per query, one pass)",
                     f"dense {p50['dense']:.1f} ms p50, hybrid {p50['hybrid']:.1f}, BM25 {p50['bm25']:.2f}",
                     f"bare encode + `faiss` search {bare:.1f} ms; bare `bm25s.retrieve` {p50['bm25s']:.2f} ms",
                     f"dense **{p50['dense'] / bare:.2f}×**; BM25 {p50['bm25'] / p50['bm25s']:.2f}× (one pass)",
                     goal(p50["dense"] / bare, 1.2) + " (dense)"))
    if raw.get("quality"):
        qu = raw["quality"]
        cells = ", ".join(f"{m} {qu[m]['recall@1']:.3f} / {qu[m]['recall@5']:.3f}" for m in ("hybrid", "dense", "bm25")
                          if m in qu)
        rows.append((f"`bench/corpus.py` retrieval quality ({where}; {qu['hybrid']['n']} questions \"capital of "
                     "X\" → X's profile)", f"recall@1 / @5: {cells}", "—", "—", "—"))
    return rows


def update_layout_rows(raw: dict[str, Any]) -> list[Row]:
    lay = raw["layouts"]
    plain, shared = lay["plain (reference)"], lay["shared + chunks"]
    ratio = [a / b for a, b in zip(shared["seconds"], plain["seconds"], strict=True)]
    a = raw["args"]
    return [(f"`bench/update_layout.py` (one RL step's agent trajectories, {a['prompts']} questions × G{a['group']}: "
             f"{raw['sequences']} sequences, {raw['tokens']:,} tokens; micro-batch {a['micro_batch']}, KL {a['kl']}; "
             f"{len(ratio)} rounds)", f"shared prefix + chunks {spread(shared['seconds'], '.1f', ' s')}, "
             f"{shared['positions']:,} positions fed", f"plain padded micro-batches "
             f"{spread(plain['seconds'], '.1f', ' s')}, {plain['positions']:,} positions",
             f"**{spread(ratio, '.2f', '×')}** time; {shared['positions'] / plain['positions']:.2f}× positions", "—")]


def sft_layout_rows(raw: dict[str, Any]) -> list[Row]:
    lay = raw["layouts"]
    plain, light = lay["one padded pass (reference)"], lay["padding-light passes"]
    ratio = [a / b for a, b in zip(light["seconds"], plain["seconds"], strict=True)]
    return [(f"`bench/sft_layout.py` ({raw['steps']} SFT steps of {raw['args']['micro_batch']} demonstrations, "
             f"{raw['tokens']:,} tokens; {len(ratio)} rounds)", f"padding-light passes "
             f"{spread(light['seconds'], '.1f', ' s')}, {light['positions']:,} positions fed",
             f"one padded pass a step {spread(plain['seconds'], '.1f', ' s')}, {plain['positions']:,} positions",
             f"**{spread(ratio, '.2f', '×')}** time; {light['positions'] / plain['positions']:.2f}× positions", "—")]


def scaling_rows(raw: dict[str, Any]) -> list[Row]:
    rounds = raw["rounds"]
    rows: list[Row] = []
    single = [r["single"]["s_per_step"] for r in rounds if "single" in r]
    where = f"one RL step of smollm2-135m, {raw['args']['prompts']} prompts × G4 a process, {len(rounds)} rounds"
    if single and all("dp2" in r for r in rounds):
        dp2 = [r["dp2"]["s_per_step"] for r in rounds]
        eff = [a / b for a, b in zip(single, dp2, strict=True)]
        rows.append((f"`bench/scaling.py` data-parallel, 2 processes ({where})", f"{spread(dp2, '.1f', ' s/step')} "
                     "with twice the prompts", f"one process {spread(single, '.1f', ' s/step')}",
                     f"weak-scaling efficiency **{spread(eff, '.2f')}**", goal(median(eff), 0.8, at_most=False, unit="")))
    if single and all("server" in r for r in rounds):
        srv = [r["server"]["s_per_step"] for r in rounds]
        ratio = [a / b for a, b in zip(srv, single, strict=True)]
        rows.append((f"`bench/scaling.py` generation server ({where})", f"{spread(srv, '.1f', ' s/step')}",
                     f"in-process {spread(single, '.1f', ' s/step')}", f"**{spread(ratio, '.2f', '×')}**", "—"))
    return rows


def first_answer_rows(raw: dict[str, Any]) -> list[Row]:
    runs = raw["runs"]
    answer = [r["answer_s"] for r in runs]
    dense = [r["dense_s"] for r in runs if r.get("dense_s") is not None]
    warm = [r["warm_s"] for r in runs]
    ratio = [a / w for a, w in zip(answer, warm, strict=True)]
    dense_cell = spread(dense, ".1f", " s") if len(dense) == len(runs) else f"complete in {len(dense)} of {len(runs)} runs"
    dense_goal = (goal(median(dense), raw["goal_dense_s"], unit=" s") if len(dense) == len(runs)
                  else f"≤ {raw['goal_dense_s']:g} s: **missed**")
    return [(f"`bench/first_answer.py` (README's command 1 on a fresh cache, {len(runs)} runs)",
             f"first answer {spread(answer, '.1f', ' s')}; dense index complete {dense_cell}",
             f"the same question on the warm cache {spread(warm, '.1f', ' s')}", f"{spread(ratio, '.1f', '×')} the warm ask",
             f"{goal(median(answer), raw['goal_answer_s'], unit=' s')} (answer); {dense_goal} (dense)")]


def memory_rows(raw: dict[str, Any]) -> list[Row]:
    res = {(r["stage"], r["setting"]): r for r in raw["results"]}
    rows: list[Row] = []
    for stage in dict.fromkeys(st for st, _ in res):
        ref = res.get((stage, "nogc"))
        for (st, setting), r in res.items():
            if st != stage or setting == "nogc":
                continue
            ratio = f"**{r['peak_rss_gb'] / ref['peak_rss_gb']:.2f}×** memory, {r['wall_s'] / ref['wall_s']:.2f}× time" \
                if ref else "—"
            rows.append((f"`bench/memory.py` {stage} stage, setting {setting} ({raw['demonstrations']} demonstrations, "
                         "one run each)", f"peak RSS {r['peak_rss_gb']:.2f} GB, {r['wall_s']:.0f} s",
                         f"without activation checkpointing: {ref['peak_rss_gb']:.2f} GB, {ref['wall_s']:.0f} s"
                         if ref else "—", ratio, goal(r["peak_rss_gb"], 4.0, unit=" GB")))
    return rows


def gpu_profile_rows(raw: dict[str, Any]) -> list[Row]:
    res, a = raw["results"], raw["args"]
    sdpa, eager = res["sdpa"], res.get("eager")
    return [(f"`bench/gpu_profile.py` ({raw['variant']}, {a['rows']} rows × {a['prompt_tokens']}-token prompts, "
             f"{a['new_tokens']} new tokens, on {raw['device']}; one generate after a warm-up)",
             f"sdpa {sdpa['generate_s']:.2f} s, {sdpa['tokens_per_s']:.1f} tok/s; a `model(...)` step "
             f"{sdpa.get('model_step_ms', float('nan')):.1f} ms",
             f"eager attention {eager['generate_s']:.2f} s, {eager['tokens_per_s']:.1f} tok/s" if eager else "—",
             f"{sdpa['generate_s'] / eager['generate_s']:.2f}× (one run)" if eager else "—", "—")]


def _on(raw: dict[str, Any]) -> str:
    """Where a GPU check ran: the GPU's name and the precision, or the CPU (a dry run)."""
    return f"on {raw['gpu']} ({raw.get('dtype', 'auto')})" if raw.get("gpu") else "on the CPU, a dry run"


def gpu_throughput_rows(raw: dict[str, Any]) -> list[Row]:
    rounds, a = raw["rounds"], raw["agent"]
    ours = [r["rollout"]["tokens_per_s"] for r in rounds]
    bare = [r["bare_generate"]["tokens_per_s"] for r in rounds]
    busy = [r["rollout"]["gpu_busy_pct"] for r in rounds if r["rollout"].get("gpu_busy_pct") is not None]
    t = raw["target"]
    bench = (f"`bench/gpu_check.py --throughput` ({raw['model']} + LoRA r16, {raw['rows']} concurrent agent rows "
             f"({raw['rows'] // raw['group_size']} questions × G{raw['group_size']}), ≤ {a['max_turns']} turns × "
             f"{raw['new_tokens']} tokens at T 1.0, {raw['decode']} decode, {raw['retriever']}; {_on(raw)}; "
             f"{len(rounds)} alternating rounds after a warm-up)")
    figure = f"rollout {spread(ours, '.0f', ' generated tok/s')}"
    if busy:
        figure += f"; GPU busy {spread(busy, '.0f', ' %')}"
    reference = (f"bare batched HF `generate` of the same rows' opening prompts, the same {raw['new_tokens']}-token "
                 f"cap: {spread(bare, '.0f', ' tok/s')}")
    ratio = [r["ratio"] for r in rounds]
    if t.get("met") is None:
        verdict = "— (the goal is for 64 rows on a GPU)"
    else:
        verdict = (f"≥ {t['tokens_per_s']:g} tok/s and ≥ {t['ratio']:g}× bare: "
                   f"**{'met' if t['met'] else 'missed'}**")
    return [(bench, figure, reference, f"**{spread(ratio, '.2f', '×')}**", verdict)]


def gpu_recipe_rows(raw: dict[str, Any]) -> list[Row]:
    c, rl, sft, ev = raw["config"], raw["rl"], raw["sft"], raw["eval"]
    p = ev["paired"]
    bench = (f"`bench/gpu_check.py --recipe` ({raw['model']}: {c['demos']} demonstrations → SFT → {rl['steps']} RL "
             f"steps × {rl['rows_per_step']} rows → `eval qa` of base and trained on {p['n']} {ev['bench']} "
             f"questions, {raw['corpus']['profiles']} Factbook profiles, {raw['retriever']}; {_on(raw)})")
    busy = f", GPU busy {rl['gpu_busy_pct']:.0f} %" if rl.get("gpu_busy_pct") is not None else ""
    peak = f"; peak {raw['peak_gpu_gb']:.2f} GB" if raw.get("peak_gpu_gb") is not None else ""
    figure = (f"{raw['total_s'] / 60:.1f} min in all; RL {rl['s_per_step']:.2f} s/step (rollout "
              f"{rl['rollout_s_per_step']:.2f}, update {rl['update_s_per_step']:.2f}), {rl['generated_tokens_per_s']:.0f} "
              f"generated tok/s{busy}; SFT {sft['s_per_step']:.2f} s/step{peak}")
    reference = (f"the base model on the same questions: EM {ev['base']['em']:.3f}, F1 {ev['base']['f1']:.3f}; "
                 f"trained EM {ev['trained']['em']:.3f}, F1 {ev['trained']['f1']:.3f}")
    ratio = (f"paired F1 **{p['f1_diff']:+.3f}** [{p['f1_ci'][0]:+.3f}, {p['f1_ci'][1]:+.3f}] "
             f"({p['em_wins']} wins, {p['em_losses']} losses)")
    verdict = goal(raw["total_s"] / 60, 8, unit=" min") if raw.get("gpu") else "— (the goal is for one GPU call)"
    return [(bench, figure, reference, ratio, verdict)]


ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "agent_step": agent_step_rows,
    "train_step": train_step_rows,
    "rollout": rollout_rows,
    "sandbox": sandbox_rows,
    "service": service_rows,
    "corpus": corpus_rows,
    "update_layout": update_layout_rows,
    "sft_layout": sft_layout_rows,
    "scaling": scaling_rows,
    "first_answer": first_answer_rows,
    "memory": memory_rows,
    "gpu_profile": gpu_profile_rows,
    "gpu_throughput": gpu_throughput_rows,
    "gpu_recipe": gpu_recipe_rows,
}


# ---- the table -----------------------------------------------------------------------------------
def load_raw(raw_dir: Path = RAW_DIR) -> list[tuple[Path, dict[str, Any]]]:
    """The newest file of each (bench, variant), in ``ROWS`` order, then by variant."""
    newest: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = {}
    for path in sorted(raw_dir.glob("*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise TableError(f"{path} is not valid JSON ({e})") from e
        if raw.get("bench") not in ROWS:
            raise TableError(f"{path}: bench/table.py has no rows for bench {raw.get('bench')!r}; add a function to ROWS")
        key = (raw["bench"], raw.get("variant", ""))
        if key not in newest or raw["started"] > newest[key][1]["started"]:
            newest[key] = (path, raw)
    order = list(ROWS)
    return [newest[k] for k in sorted(newest, key=lambda k: (order.index(k[0]), k[1]))]


def run_cell(path: Path, raw: dict[str, Any]) -> str:
    m = raw["machine"]
    cpu = m.get("model") or "?"
    flags = ", ".join(m.get("flags", [])) or "no flags read"
    load = m.get("load_at_start")
    shared = f"; load {load[0]:.1f} at the start" if load else ""
    note = f"; {raw['note']}" if raw.get("note") else ""
    rel = Path(os.path.relpath(path, ROOT / "docs")).as_posix()
    return (f"{raw['started'][:10]}, {cpu} ({m.get('logical_cpus', '?')} CPUs; {flags}){shared}{note}; "
            f"[{path.name}]({rel})")


def render(raw_dir: Path = RAW_DIR) -> str:
    lines = [BEGIN, HEADER]
    for path, raw in load_raw(raw_dir):
        for row in ROWS[raw["bench"]](raw):
            cells = [c.replace("|", "\\|") for c in row] + [run_cell(path, raw)]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append(END)
    return "\n".join(lines)


def current(doc: str) -> str:
    """The generated block as it stands in ``doc``."""
    if BEGIN not in doc or END not in doc:
        raise TableError(f"{DOC} has no latest-figures block (its first line is {BEGIN!r})")
    start = doc.index(BEGIN)
    return doc[start:doc.index(END, start) + len(END)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only check; exit 1 if the table differs from the files")
    args = p.parse_args(argv)
    doc = DOC.read_text(encoding="utf-8")
    old, new = current(doc), render()
    if args.check:
        if old != new:
            print(f"{DOC} is out of date with docs/results/bench/: run python bench/table.py", file=sys.stderr)
            return 1
        return 0
    if old != new:
        DOC.write_text(doc.replace(old, new), encoding="utf-8")
        print(f"rewrote the latest figures in {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
