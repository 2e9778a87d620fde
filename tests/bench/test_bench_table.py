"""docs/benchmarks.md's latest-figures table is what bench/table.py makes of the committed raw files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import table

ROOT = Path(__file__).resolve().parents[2]


def test_the_latest_table_agrees_with_the_raw_files():
    doc = table.DOC.read_text(encoding="utf-8")
    assert table.current(doc) == table.render(), (
        "docs/benchmarks.md's latest figures differ from docs/results/bench/*.json: run python bench/table.py"
    )


def test_every_row_traces_to_a_committed_raw_file():
    files = [path for path, _ in table.load_raw()]
    assert files, "the latest table has no raw file behind it"
    block = table.current(table.DOC.read_text(encoding="utf-8"))
    for path in files:
        assert f"]({path.relative_to(ROOT / 'docs').as_posix()})" in block
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell committed files")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "docs/results/bench"], capture_output=True,
                             text=True, check=True).stdout.split()
    missing = [p.name for p in files if p.relative_to(ROOT).as_posix() not in tracked]
    assert not missing, f"raw files behind the table are not committed: {missing}"


def _raw(bench: str, variant: str = "", **data) -> dict:
    return {"schema": 1, "bench": bench, "variant": variant, "started": "2026-12-05T10:00:00+0000", "args": {},
            "note": "shared", "machine": {"model": "Test CPU", "logical_cpus": 2, "flags": ["avx2"],
                                          "load_at_start": [3.0, 2.0, 1.0]},
            "versions": {"trl": "1.16.0"}, **data}


def _steps(*seconds: float, tokens: int = 100, calls: int = 4) -> list[dict]:
    return [{"s": s, "gen_tokens": tokens, "tool_calls": calls} for s in seconds]


def test_a_goal_is_judged_on_the_median_of_the_rounds_not_the_best(tmp_path):
    # three rounds: ours / TRL per step = 0.4, 0.6, 0.55 (the first step of each side is warm-up)
    rounds = [{"ours": {"steps": _steps(99, 4, 4), "peak_rss_mb": 1024},
               "trl": {"steps": _steps(99, t, t, tokens=200), "peak_rss_mb": 2048}} for t in (10, 6.667, 7.273)]
    work = {"questions": 1, "group": 4, "tool_calls": 3, "turns": 4, "turn_tokens": 48, "lora": {"r": 16},
            "trl_stop_strings": True}
    (tmp_path / "agent_step-m-1.json").write_text(json.dumps(_raw("agent_step", "m", work=work, rounds=rounds)))
    row = table.render(tmp_path).splitlines()[3]
    assert "**0.55× (0.40–0.60)** per step" in row and "**missed**" in row
    assert "ours 4.0 s/step, 0.040 s/token; 100 generated tokens and 4.0 tool calls a step" in row
    assert "`environment_factory`: 7.3 s/step (6.7–10.0), 0.036 s/token (0.033–0.050); 200 tokens" in row
    assert "1.10× (0.80–1.20) per generated token" in row
    assert "Test CPU (2 CPUs; avx2); load 3.0 at the start; shared" in row


def test_decode_rows_use_their_own_bytes_and_each_rounds_read(tmp_path):
    rounds = [{"float32_ms": f, "int8_ms": i, "read_gbps": g, "model_step": {"float32": 70.0}}
              for f, i, g in ((30.0, 9.0, 50.0), (40.0, 12.0, 25.0), (36.0, 10.0, 40.0))]
    decode = {"float32_bytes": 500e6, "int8_bytes": 125e6, "rounds": rounds}
    (tmp_path / "rollout-m-1.json").write_text(json.dumps(_raw("rollout", "m", args={"model": "m"}, decode=decode)))
    rows = table.render(tmp_path).splitlines()[3:5]
    # float32 floors 10 / 20 / 12.5 ms: ratios 3.0 / 2.0 / 2.88; int8 floors 2.5 / 5 / 3.125: 3.6 / 2.4 / 3.2
    assert "float32 weights" in rows[0] and "**2.88× (2.00–3.00)** its floor" in rows[0] and "missed" in rows[0]
    assert "int8 weights" in rows[1] and "125 MB of int8" in rows[1] and "**3.20× (2.40–3.60)** its floor" in rows[1]


def test_every_bench_has_rows_and_an_unknown_bench_is_an_error(tmp_path):
    raws = [
        _raw("train_step", "m", args={"model": "m", "new_tokens": 64, "steps": 3},
             rounds=[{"ours": {"times": [9, 2, 2], "gen_times": [5, 1, 1], "peak_rss_mb": 1500},
                      "trl": {"times": [9, 5, 5], "peak_rss_mb": 2000}}]),
        _raw("sandbox", isolation="namespaces", rounds=[{"bare_s": [0.05, 0.06], "sandboxed_s": [0.1, 0.12]}]),
        _raw("service", "bm25", corpus="60 docs", clients=[1, 8], rounds=[{
            "in-process": {"1": {"p50_ms": 2.0, "qps": 400.0}, "8": {"p50_ms": 20.0, "qps": 380.0}},
            "service": {"1": {"p50_ms": 6.0, "qps": 150.0}, "8": {"p50_ms": 21.0, "qps": 370.0}}}]),
        _raw("corpus", "default", corpus={"documents": 10, "chunks": 20},
             build={"documents": 5, "chunks": 20, "dtype": "bfloat16", "build_s": [1.0], "bare_s": [2.0],
                    "cosine_min": 0.9999},
             search={"queries": 2, "k": 5, "seconds": {m: [0.01, 0.02] for m in
                                                       ("dense", "bm25", "hybrid", "encode", "faiss", "bm25s")}},
             quality={m: {"n": 2, "recall@1": 0.5, "recall@5": 1.0} for m in ("dense", "bm25", "hybrid")}),
        _raw("update_layout", "m", args={"prompts": 4, "group": 4, "micro_batch": 2, "kl": 0.05}, sequences=16,
             tokens=1000, model_tokens=300, layouts={
                 "plain (reference)": {"passes": 8, "positions": 1200, "seconds": [10.0, 12.0]},
                 "chunks": {"passes": 6, "positions": 1100, "seconds": [11.0, 11.0]},
                 "shared + chunks": {"passes": 6, "positions": 900, "seconds": [9.0, 9.0]}}),
        _raw("sft_layout", "m", args={"micro_batch": 4}, steps=4, examples=480, tokens=3200, layouts={
            "one padded pass (reference)": {"passes": 4, "positions": 4800, "seconds": [100.0, 110.0]},
            "padding-light passes": {"passes": 13, "positions": 3300, "seconds": [60.0, 66.0]}}),
        _raw("scaling", args={"prompts": 2}, rounds=[{"single": {"s_per_step": 80.0}, "dp2": {"s_per_step": 90.0},
                                                     "server": {"s_per_step": 85.0}}]),
        _raw("first_answer", goal_answer_s=180.0, goal_dense_s=480.0,
             runs=[{"answer_s": 130.0, "dense_s": 340.0, "warm_s": 16.0}]),
        _raw("memory", demonstrations=24, results=[{"stage": "sft", "setting": "default", "peak_rss_gb": 2.8,
                                                    "wall_s": 120}, {"stage": "sft", "setting": "nogc",
                                                                     "peak_rss_gb": 7.8, "wall_s": 100}]),
        _raw("gpu_profile", "m", device="GPU", args={"rows": 8, "prompt_tokens": 1000, "new_tokens": 48},
             results={"sdpa": {"generate_s": 1.5, "tokens_per_s": 260.0, "model_step_ms": 9.0},
                      "eager": {"generate_s": 2.0, "tokens_per_s": 190.0}}),
    ]
    for i, raw in enumerate(raws):
        (tmp_path / f"{raw['bench']}-{i}.json").write_text(json.dumps(raw))
    rendered = table.render(tmp_path)
    for raw in raws:
        assert f"`bench/{raw['bench']}.py`" in rendered
    assert "**0.40×** | ≤ 0.5×: **met**" in rendered  # train_step, one round
    assert "**0.60×** time; 0.69× positions" in rendered  # sft_layout: 60/100 and 66/110
    assert "weak-scaling efficiency **0.89**" in rendered and "≥ 0.8: **met**" in rendered
    (tmp_path / "mystery-1.json").write_text(json.dumps(_raw("mystery")))
    with pytest.raises(table.TableError, match="no rows for bench 'mystery'"):
        table.render(tmp_path)


def test_the_newest_file_of_a_bench_and_variant_makes_its_rows(tmp_path):
    for started, s in (("2026-12-01T10:00:00+0000", 0.2), ("2026-12-05T10:00:00+0000", 0.3)):
        raw = _raw("sandbox", isolation="x", rounds=[{"bare_s": [0.1], "sandboxed_s": [s]}])
        raw["started"] = started
        (tmp_path / f"sandbox-{started[:10]}.json").write_text(json.dumps(raw))
    rendered = table.render(tmp_path)
    assert "**3.00×**" in rendered and "2.00×" not in rendered and rendered.count("`bench/sandbox.py`") == 1
