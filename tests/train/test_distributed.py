"""Data-parallel training under a real launcher (``accelerate launch``, two CPU processes, gloo):
the update two ranks take together is the one a single process takes on the union of their data."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from research_agent.agent import ResearchAgent
from research_agent.train.config import TrainConfig
from research_agent.train.rl import policy_update, setup_lora
from research_agent.train.sft import train_sft
from tests.doubles import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
WORKER = str(ROOT / "tests" / "train" / "distributed_update.py")
pytestmark = pytest.mark.model  # every test trains smollm2-135m, in one process and under the launcher


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], processes: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """``accelerate launch`` with N CPU processes on this machine.  (accelerate 1.15's ``--cpu``
    starts N processes only through mpirun; ``--multi_gpu`` runs its torchrun launcher, which on a
    machine without a visible GPU gives CPU processes: the trainer then joins them with gloo.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def _trajectories(tok, browser):
    """Two groups of two (same question within a group, so their prompt is shared), four lengths."""
    runs = [("What is the capital of France?", ["<search>capital of France</search>", "<answer>Paris</answer>"]),
            ("What is the capital of France?", ["<answer>I do not know which city it is</answer>"]),
            ("What is the capital of Spain?", ["<search>capital of Spain</search>", "<answer>Madrid</answer>"]),
            ("What is the capital of Spain?", ["<answer>Lyon</answer>"])]
    trajs = [ResearchAgent(ScriptedPolicy(tok, turns, logprob=-0.5), browser.fork()).run(q, gold={"answers": ["x"]})
             for q, turns in runs]
    assert len({len(t.token_ids) for t in trajs}) == 4
    return trajs


def test_two_process_rl_update_equals_the_one_process_update(tmp_path, small_browser):
    cfg = TrainConfig(lr=1.0, kl_coef=0.05, lora={"dropout": 0.0}, max_grad_norm=1.0, compute={"micro_batch": 2})
    model, tok = setup_lora(cfg, progress=False)
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():  # non-zero B, so that A gets gradients too
        for n, p in zip([n for n, p in model.named_parameters() if p.requires_grad], params, strict=True):
            if "lora_B" in n:
                p.normal_(0, 0.01)
    init = [p.detach().clone() for p in params]
    trajs = _trajectories(tok, small_browser)
    adv, chosen = [1.0, -0.5, 0.75, -1.0], [0, 1, 2, 3]
    spec = tmp_path / "spec.pkl"
    spec.write_bytes(pickle.dumps({"cfg": cfg.to_dict(), "init": init, "trajs": trajs, "adv": adv,
                                   "chosen": chosen, "group_size": 2}))
    launch([WORKER, "rl", str(spec), str(tmp_path / "two.pt")])
    two = torch.load(tmp_path / "two.pt")
    assert two["world"] == 2 and two["mine"] == [0, 1]  # rank 0 trained group 0 only

    opt = torch.optim.SGD(params, lr=cfg.lr)
    model.train()
    one = policy_update(model, opt, params, trajs, adv, chosen, cfg, tok.pad_token_id)
    delta_one = torch.cat([(p.detach() - p0).flatten() for p, p0 in zip(params, init, strict=True)])
    delta_two = torch.cat([(p - p0).flatten() for p, p0 in zip(two["params"], init, strict=True)])
    assert delta_one.norm() > 0.1  # the step moved the adapter (and was clipped to norm 1 on both sides)
    err = float((delta_two - delta_one).abs().max())
    assert err < 1e-5 * float(delta_one.abs().max()) + 1e-7, err
    assert two["stats"]["tokens"] == one["tokens"] == sum(t.generated_tokens for t in trajs)
    for key in ("loss", "kl", "entropy"):
        assert two["stats"][key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


def _sft_records(path: Path) -> Path:
    recs = []
    for q, a, code in [("France", "Paris", "fr"), ("Spain", "Madrid", "sp"), ("Italy", "Rome", "it"),
                       ("the country that borders Spain and Andorra", "Paris", "fr")]:
        recs.append({"question": f"What is the capital of {q}?", "template": "fast", "turns": [
            {"completion": f"<search>capital of {q}</search>",
             "observation": f"\n<result>\n[factbook/{code}#0] Capital: {a}\n</result>\n"},
            {"completion": f"<answer>{a} [factbook/{code}#0]</answer>", "observation": ""}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_two_process_sft_equals_one_process_with_the_whole_micro_batch(tmp_path, monkeypatch):
    """Two ranks with two examples each take the steps one process takes with all four (two steps
    of ``train_sft`` under the launcher, SGD for AdamW: see distributed_update.py); only rank 0 writes."""
    data = _sft_records(tmp_path / "sft.jsonl")
    cfg = dict(stage="sft", tasks=str(data), epochs=2, lr=1.0, compute={"micro_batch": 4, "device": "cpu"},
               lora={"dropout": 0.0}, checkpoints={"every": 1})
    (tmp_path / "two.json").write_text(json.dumps({**cfg, "out": str(tmp_path / "two")}))
    launch([WORKER, "sft", str(tmp_path / "two.json")])
    monkeypatch.setattr(torch.optim, "AdamW", torch.optim.SGD)
    train_sft(TrainConfig(**cfg, out=str(tmp_path / "one")), progress=False)
    from safetensors.torch import load_file

    one, two, start = (load_file(str(tmp_path / d / "adapter_model.safetensors"))
                       for d in ("one/adapter", "two/adapter", "one/checkpoints/step-1"))
    assert one.keys() == two.keys()
    delta_one = torch.cat([(one[k] - start[k]).flatten() for k in one])
    delta_two = torch.cat([(two[k] - start[k]).flatten() for k in one])
    assert delta_one.norm() > 0.1  # the second step moved the adapter
    err = float((delta_two - delta_one).abs().max())
    assert err < 1e-5 * float(delta_one.abs().max()) + 1e-7, err
    rows = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for a, b in zip(rows, ref, strict=True):
        assert a["tokens"] == b["tokens"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == ["step-1", "step-2"]
    first = load_file(str(tmp_path / "two" / "checkpoints" / "step-1" / "adapter_model.safetensors"))
    assert all(torch.allclose(first[k], start[k], atol=1e-6) for k in start)  # and the first step agreed


def _tasks(path: Path) -> Path:
    items = [{"id": f"t{i}", "question": q, "answers": [a], "split": "train"} for i, (q, a) in enumerate([
        ("What is the capital of France?", "Paris"), ("What is the capital of Spain?", "Madrid"),
        ("What is the capital of Italy?", "Rome")])]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def test_rl_under_the_launcher_writes_once_and_resumes(tmp_path, small_corpus_dir):
    out = tmp_path / "run"
    flags = ["-m", "research_agent.train", "--stage", "rl", "--tasks", str(_tasks(tmp_path / "tasks.jsonl")),
             "--corpus", str(small_corpus_dir), "--out", str(out), "--device", "cpu", "--prompts-per-step", "2",
             "--group-size", "2", "--max-turns", "2", "--max-new-tokens", "12", "--checkpoint-every", "1",
             "--filter-low", "0", "--filter-high", "1", "--filter-zero-variance", "false",
             "--drop-void-turns", "false", "--lr", "1e-3", "--concurrency", "2"]
    launch([*flags, "--steps", "1"])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["trained_trajectories"] == 4  # both ranks' groups are in the step's metrics
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-1"]
    done = launch([*flags, "--steps", "2", "--resume"])
    assert done.stderr.count("resumed from") == 1  # said once, by rank 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1", "step-2"]
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert (out / "adapter" / "adapter_config.json").exists()
