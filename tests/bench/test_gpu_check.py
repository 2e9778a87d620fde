"""bench/gpu_check.py: its pure parts (the busy sampler, the OUT limits, the model's placement, the plan,
the figures, the table rows) here; the whole ``--recipe`` and ``--throughput`` on the CPU, marked slow."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import table
from bench.gpu_check import DRY_RUN, fill_defaults, parser
from bench.gpu_machine import (
    OUT_MAX_FILE_BYTES,
    BusySampler,
    NotReady,
    check_out,
    out_problems,
    place_model,
)
from bench.gpu_recipe import RecipeCheck, rl_figures, shown, stages
from bench.gpu_throughput import rollout_items, verdict

ROOT = Path(__file__).resolve().parents[2]


# ---- the busy sampler ---------------------------------------------------------------------------------
def test_the_busy_sampler_averages_the_readings_it_took_while_the_block_ran():
    readings = iter([10.0, 30.0, 50.0] + [50.0] * 1000)
    with BusySampler(lambda: next(readings), interval=0.01) as busy:
        while len(busy.samples) < 3:
            time.sleep(0.005)
    n = len(busy.samples)
    time.sleep(0.05)
    assert len(busy.samples) == n, "the sampler kept reading after the block"
    assert busy.percent() == round(sum(busy.samples) / n, 1)
    assert busy.samples[:3] == [10.0, 30.0, 50.0]


def test_the_busy_sampler_reports_none_without_a_reader_and_skips_failed_reads():
    with BusySampler(None) as busy:
        pass
    assert busy.percent() is None

    def flaky():
        raise RuntimeError("NVML said no")

    with BusySampler(flaky, interval=0.01) as busy:
        time.sleep(0.03)
    assert busy.percent() is None


# ---- what comes back from the device ------------------------------------------------------------------
def _file(path: Path, size: int = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def test_a_shipped_agent_and_its_report_come_back_whole(tmp_path):
    for rel in ("agent.json", "card.json", "gpu_check.json", "compare.md", "adapter/adapter_model.safetensors",
                "adapter/adapter_config.json", "adapter/README.md"):
        _file(tmp_path / rel)
    assert out_problems(tmp_path) == []
    assert check_out(tmp_path)[0] == "adapter/README.md"


def test_each_limit_of_what_comes_back_is_named(tmp_path):
    for i in range(9):
        _file(tmp_path / f"f{i}.json")
    _file(tmp_path / "big.safetensors", OUT_MAX_FILE_BYTES + 1)
    _file(tmp_path / "a" / "b" / "c" / "deep.json")
    _file(tmp_path / "a b.json")
    problems = "\n".join(out_problems(tmp_path))
    assert "12 files, over 8" in problems
    assert "big.safetensors: 16.0 MiB, over 16 MiB" in problems
    assert "deep.json: 3 folders down" in problems
    assert "a b.json: a name with characters" in problems
    with pytest.raises(SystemExit, match="would not come back whole"):
        check_out(tmp_path)


# ---- the model's weights on a machine with no network -------------------------------------------------
@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RESEARCH_AGENT_CACHE", str(cache))
    return cache


def test_a_missing_model_stops_at_once_saying_what_to_put_where(empty_cache, monkeypatch):
    from research_agent.inference import models

    def no_fetch(*a, **k):
        raise AssertionError("a GPU check must not try the network")

    monkeypatch.setattr(models, "fetch_package", no_fetch)
    with pytest.raises(NotReady) as e:
        place_model("smollm2-135m")
    msg = str(e.value)
    assert str(empty_cache / "models" / "smollm2-135m" / "hf") in msg
    assert "--model-dir" in msg and "SmolLM2-135M-Instruct.Q4_1.gguf" in msg and "RESEARCH_AGENT_CACHE" in msg


def test_a_converted_folder_given_as_model_dir_is_linked_into_the_cache(empty_cache, tmp_path):
    folder = tmp_path / "weights"
    _file(folder / "config.json")
    _file(folder / "model.safetensors")
    assert place_model("smollm2-135m", folder) == "converted"
    assert (empty_cache / "models" / "smollm2-135m" / "hf").resolve() == folder.resolve()
    assert place_model("smollm2-135m") == "converted"  # found in the cache from now on


def test_gguf_parts_are_joined_in_order_and_checked(empty_cache, tmp_path, monkeypatch):
    from research_agent.inference import models

    blob = bytes(range(256)) * 40
    spec = models.ModelSpec(name="tiny", packages=(), gguf_name="tiny.gguf", size=len(blob),
                            sha256=hashlib.sha256(blob).hexdigest())
    monkeypatch.setitem(models.MODELS, "tiny", spec)
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, start in enumerate(range(0, len(blob), 4000)):
        (parts / f"tiny.gguf.part{i:02d}").write_bytes(blob[start:start + 4000])
    assert place_model("tiny", parts) == "gguf"
    assert (empty_cache / "models" / "tiny" / "tiny.gguf").read_bytes() == blob

    (empty_cache / "models" / "tiny" / "tiny.gguf").unlink()
    (parts / "tiny.gguf.part01").write_bytes(b"damaged")
    with pytest.raises(NotReady, match="do not match the pinned"):
        place_model("tiny", parts)
    assert not (empty_cache / "models" / "tiny" / "tiny.gguf").exists()


def test_a_model_dir_without_weights_is_refused(empty_cache, tmp_path):
    (tmp_path / "nothing").mkdir()
    with pytest.raises(NotReady, match="holds neither"):
        place_model("smollm2-135m", tmp_path / "nothing")


# ---- the plan and its figures -------------------------------------------------------------------------
def test_the_recipe_check_runs_64_rows_and_evaluates_both_models_under_the_same_budgets():
    work, out = Path("/scratch/w"), Path("/scratch/out")
    plan = {name: argv for name, _, argv in stages(RecipeCheck(), work, out, "bm25")}
    assert list(plan) == ["demonstrations", "sft-export", "sft", "rl", "export", "eval-base", "eval-trained", "compare",
                          "ship"]

    def flag(argv, name):
        return argv[argv.index(name) + 1]

    rl = plan["rl"]
    assert int(flag(rl, "--prompts-per-step")) * int(flag(rl, "--group-size")) == int(flag(rl, "--concurrency")) == 64
    assert int(flag(rl, "--steps")) >= 32 and flag(rl, "--init-adapter") == "/scratch/w/sft/adapter"
    base, trained = plan["eval-base"], plan["eval-trained"]
    assert flag(base, "--limit") == "100" and flag(base, "--bench") == "factbook-test"
    assert base[:-2] == trained[:-4] and flag(trained, "--adapter") == "/scratch/w/adapter"
    assert [a for a in plan["ship"] if a.startswith("max_")] == [a for a in base if a.startswith("max_")]
    assert flag(plan["ship"], "--out") == "/scratch/out"
    assert all(flag(a, "--retriever") == "bm25" for a in (rl, base, plan["demonstrations"]))
    assert shown("eval.cli", plan["ship"][:4], work, out) == "python -m eval --adapter '$WORK/adapter' --model smollm2-135m"


def test_rl_figures_leave_out_the_first_step_and_split_rollout_from_update():
    rows = [{"step": 1, "seconds": 30.0, "rollout_seconds": 25.0, "rollout_generated_tokens": 1000,
             "rollout_trajectories": 64, "reward": 0.1},
            {"step": 2, "seconds": 6.0, "rollout_seconds": 4.0, "rollout_generated_tokens": 8000,
             "rollout_trajectories": 64, "reward": 0.2},
            {"step": 3, "seconds": 8.0, "rollout_seconds": 6.0, "rollout_generated_tokens": 12000,
             "rollout_trajectories": 64, "reward": 0.3}]
    f = rl_figures(rows)
    assert f["timed_steps"] == [2, 3] and f["s_per_step"] == 7.0
    assert f["rollout_s_per_step"] == 5.0 and f["update_s_per_step"] == 2.0
    assert f["generated_tokens_per_s"] == 2000.0 and f["rows_per_step"] == 64
    assert f["reward_first_last"] == [0.1, 0.3]


def test_throughput_rows_repeat_each_question_g_times_and_the_goal_applies_to_64_rows_on_a_gpu():
    items = rollout_items([{"id": "a", "question": "?"}, {"id": "b", "question": "?"}], 4)
    assert [it["id"] for it in items][:5] == ["a::g0", "a::g1", "a::g2", "a::g3", "b::g0"]
    assert verdict("smollm2-135m", "cuda", 64, 2500.0, 2.5)["met"] is True
    assert verdict("smollm2-135m", "cuda", 64, 2500.0, 1.5)["met"] is False
    assert verdict("qwen2.5-coder-0.5b", "cuda", 64, 1200.0, 2.1)["met"] is True
    assert verdict("smollm2-135m", "cpu", 4, 10.0, 3.0)["met"] is None


def _raw(bench: str, data: dict) -> dict:
    return {"bench": bench, "variant": "smollm2-135m", "started": "2026-12-07T05:00:00+0000",
            "machine": {"model": "a CPU"}, **data}


def test_the_table_renders_a_throughput_and_a_recipe_record():
    rounds = [{"rollout": {"tokens_per_s": 2400.0, "gpu_busy_pct": 61.0}, "bare_generate": {"tokens_per_s": 1000.0},
               "ratio": 2.4},
              {"rollout": {"tokens_per_s": 2600.0, "gpu_busy_pct": 65.0}, "bare_generate": {"tokens_per_s": 1000.0},
               "ratio": 2.6}]
    thr = _raw("gpu_throughput", {"model": "smollm2-135m", "gpu": "NVIDIA H100 80GB HBM3", "dtype": "auto",
                                  "rows": 64, "group_size": 4, "new_tokens": 48, "decode": "static",
                                  "retriever": "bm25", "agent": {"max_turns": 4}, "rounds": rounds,
                                  "target": verdict("smollm2-135m", "cuda", 64, 2500.0, 2.5)})
    (row,) = table.ROWS["gpu_throughput"](thr)
    assert "2500 generated tok/s (2400–2600)" in row[1] and "**2.50× (2.40–2.60)**" == row[3]
    assert "on NVIDIA H100" in row[0] and "**met**" in row[4]
    rec = _raw("gpu_recipe", {
        "model": "smollm2-135m", "gpu": None, "retriever": "bm25", "config": {"demos": 4}, "corpus": {"profiles": 20},
        "total_s": 300.0, "peak_gpu_gb": None,
        "rl": {"steps": 2, "rows_per_step": 4, "s_per_step": 5.0, "rollout_s_per_step": 3.0, "update_s_per_step": 2.0,
               "generated_tokens_per_s": 40.0, "gpu_busy_pct": None},
        "sft": {"s_per_step": 9.0},
        "eval": {"bench": "factbook-test", "base": {"em": 0.1, "f1": 0.2}, "trained": {"em": 0.3, "f1": 0.4},
                 "paired": {"n": 6, "f1_diff": 0.2, "f1_ci": [0.05, 0.35], "em_wins": 2, "em_losses": 0}}})
    (row,) = table.ROWS["gpu_recipe"](rec)
    assert "on the CPU, a dry run" in row[0] and "5.0 min in all" in row[1]
    assert row[3].startswith("paired F1 **+0.200** [+0.050, +0.350]") and row[4].startswith("—")


# ---- the command line -----------------------------------------------------------------------------
def _args(*argv: str):
    args = parser().parse_args(list(argv))
    return fill_defaults(args), args


def test_without_dry_run_the_modes_keep_the_issues_sizes_on_cuda():
    mode, a = _args("--throughput")
    assert (mode, a.device, a.rows, a.rounds, a.group_size, a.model) == ("throughput", "cuda", 64, 3, 4, "smollm2-135m")
    mode, a = _args("--recipe")
    from bench.gpu_recipe import recipe_from_args

    c = recipe_from_args(a)
    assert (mode, c.device, c.rows, c.rl_steps, c.eval_questions) == ("recipe", "cuda", 64, 32, 100)
    mode, a = _args()
    assert (mode, a.model, a.device) == ("short", "qwen2.5-coder-0.5b", "cuda")


def test_dry_run_is_the_same_mode_on_the_cpu_at_tiny_sizes_and_a_flag_given_wins():
    mode, a = _args("--recipe", "--dry-run", "--rl-steps", "3")
    from bench.gpu_recipe import recipe_from_args

    c = recipe_from_args(a)
    assert (mode, c.device, c.retriever, c.model) == ("recipe", "cpu", "bm25", "smollm2-135m")
    assert c.rl_steps == 3 and c.demos == DRY_RUN["recipe"]["demos"] and c.rows == 4
    mode, a = _args("--throughput", "--dry-run", "--device", "cuda")
    assert (mode, a.device, a.rows, a.rounds) == ("throughput", "cuda", 4, 1)


def test_a_recipe_without_weights_stops_before_any_work(empty_cache, tmp_path, capsys):
    from bench.gpu_check import main

    out, work = tmp_path / "out", tmp_path / "work"
    with pytest.raises(NotReady, match="is not on this machine") as e:
        main(["--recipe", "--dry-run", "--out", str(out), "--work", str(work)])
    assert "--model-dir" in str(e.value) and "RESEARCH_AGENT_MODEL_DIR" in str(e.value)
    assert not out.exists() and not work.exists()


# ---- end to end on the CPU ----------------------------------------------------------------------------
def _run(*argv: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.model
def test_the_recipe_runs_end_to_end_on_the_cpu_and_ships_within_the_transfer_limits(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = _run("--recipe", "--dry-run", "--out", str(out), "--work", str(work))
    assert out_problems(out) == []
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert {"agent.json", "card.json", "compare.md", "gpu_check.json", "adapter/adapter_model.safetensors",
            "adapter/adapter_config.json"} <= set(files) and len(files) <= 8
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["bench"] == "gpu_recipe" and report["complete"] and report["retriever"] == "bm25"
    assert set(report["stages"]) >= {"corpus", "demonstrations", "sft", "rl", "eval-base", "eval-trained", "ship"}
    assert all(s["gpu_busy_pct"] is None and s["seconds"] > 0 for s in report["stages"].values())
    assert report["rl"]["steps"] == 2 and report["rl"]["timed_steps"] == [2] and report["rl"]["rows_per_step"] == 4
    assert report["sft"]["steps"] == 1 and report["device"] == "cpu" and report["model"] == "smollm2-135m"
    # the RL figures are the run's own metrics rows, the first (warm-up) step left out of the rates
    steps = [json.loads(line) for line in (work / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert report["rl"]["generated_tokens"] == [r["rollout_generated_tokens"] for r in steps]
    assert all(t > 0 for t in report["rl"]["generated_tokens"])
    assert report["rl"]["generated_tokens_per_s"] == pytest.approx(
        steps[1]["rollout_generated_tokens"] / steps[1]["rollout_seconds"], rel=0.01)
    assert report["rl"]["rollout_s_per_step"] == pytest.approx(steps[1]["rollout_seconds"], abs=0.01)
    assert all(f in proc.stdout for f in ("RESULT", "generated_tokens_per_s", "s_per_step", "peak_gpu_gb"))
    assert report["eval"]["paired"]["n"] == 4 and report["eval"]["base"]["n"] == 4
    assert report["out_files"] == files
    card = json.loads((out / "card.json").read_text())
    assert card["command"].startswith("python bench/gpu_check.py --recipe") and "corpus" in card["inputs"]
    assert any(k.startswith("questions:factbook-test") for k in card["inputs"])
    assert [s["stage"] for s in card["stages"]][-1] == "ship" and "$WORK" in card["stages"][0]["command"]
    agent = json.loads((out / "agent.json").read_text())
    assert agent["model"] == "smollm2-135m" and agent["settings"]["max_turns"] == 2
    table.ROWS["gpu_recipe"](report)  # the record makes its table row


@pytest.mark.slow
@pytest.mark.model
def test_throughput_runs_on_the_cpu_as_a_dry_run(tmp_path):
    out = tmp_path / "out"
    proc = _run("--throughput", "--dry-run", "--out", str(out), "--work", str(tmp_path / "work"))
    assert "RESULT" in proc.stdout
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["bench"] == "gpu_throughput" and report["decode"] == "loop" and report["rows"] == 4
    (r,) = report["rounds"]  # the warm-up of each side is timed apart, not among the rounds
    assert set(report["warmup"]) == {"rollout_s", "bare_s"}
    # tokens counted from what each side made: at most rows x turns x cap for the rollout, rows x cap for bare
    assert 0 < r["rollout"]["tokens"] <= 4 * 2 * 8 and 0 < r["bare_generate"]["tokens"] <= 4 * 8
    assert r["rollout"]["tokens_per_s"] == pytest.approx(r["rollout"]["tokens"] / r["rollout"]["seconds"], rel=0.01)
    assert report["rollout_tokens_per_s"] == r["rollout"]["tokens_per_s"]
    assert r["ratio"] == pytest.approx(r["rollout"]["tokens_per_s"] / r["bare_generate"]["tokens_per_s"], abs=0.01)
    assert report["target"]["met"] is None and report["gpu_busy_pct"] is None
    table.ROWS["gpu_throughput"](report)
