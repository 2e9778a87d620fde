"""Trainer and generation server as two processes on loopback: rollouts in token space on the server,
the adapter published to it after every step, and a dead server stopping training with one error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from research_agent.configs import build
from research_agent.train.config import TrainConfig
from research_agent.train.rl import train_rl
from tests.loras import random_lora

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    """``python -m research_agent.inference.serve`` in its own process (the smollm2 base, CPU, a free port)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "research_agent.inference.serve", "--model", "smollm2-135m",
                             "--port", "0", "--device", "cpu"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:(\d+)/v1", line)
    assert match, f"the server did not start: {line!r}"
    yield proc, f"http://127.0.0.1:{match.group(1)}"
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def sft_adapter(smol, tmp_path_factory):
    """A random LoRA standing in for an SFT start: the RL run sits on it, so what is published is a
    chain (folded into one LoRA), and a server ignoring it would sample other tokens."""
    return random_lora(smol[0], tmp_path_factory.mktemp("sft") / "adapter", seed=1)


def tasks_file(tmp_path):
    items = [{"id": f"t{i}", "question": f"What is the capital of {c}?", "answers": [a], "split": "train"}
             for i, (c, a) in enumerate([("France", "Paris"), ("Spain", "Madrid")])]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def cfg(tmp_path, out, **kw):
    # two questions a step: REINFORCE's baseline is the batch mean, so greedy rollouts still differ in reward
    return build(TrainConfig, dict(tasks=str(tasks_file(tmp_path)), out=str(tmp_path / out), steps=2,
                                   prompts_per_step=2, group_size=2, max_turns=2, max_new_tokens=12, temperature=0.0,
                                   checkpoint_every=1, filter_low=0, filter_high=1, filter_zero_variance=False,
                                   drop_void_turns=False, lr=1e-2, concurrency=2, kl_coef=0.0, **kw))


def _complete(url: str, model: str, prompt: str) -> str:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"][0]["text"]


# two 2-step RL runs (in-process, then on the server) and a server process: ~2 min on two cores
def test_rollouts_on_the_server_train_the_same_adapter_as_in_process(tmp_path, small_browser, server,
                                                                     sft_adapter):
    _, url = server
    local = cfg(tmp_path, "local", init_adapter=str(sft_adapter))
    train_rl(local, browser=small_browser, progress=False)
    remote = cfg(tmp_path, "remote", rollout_endpoint=url, init_adapter=str(sft_adapter))
    train_rl(remote, browser=small_browser, progress=False)
    a = [json.loads(x) for x in (tmp_path / "local" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "remote" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward", "gen_tokens", "turns"):  # the same greedy rollouts, step 2 under the published adapter
        assert [r[key] for r in a] == [r[key] for r in b], key
    assert all(r["publish_seconds"] > 0 for r in b)
    wa = load_file(str(tmp_path / "local" / "adapter" / "adapter_model.safetensors"))
    wb = load_file(str(tmp_path / "remote" / "adapter" / "adapter_model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    prompt = "Question: What is the capital of France?\nAnswer:"
    assert _complete(url, "smollm2-135m", prompt) != _complete(url, "remote-step-2", prompt), (
        "the served adapter must change what the model says, or equal rollouts would prove nothing")
    models = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=10).read())["data"]
    assert [m["id"] for m in models] == ["smollm2-135m", "remote-step-2"], "the last step's adapter is served"
    assert sorted(p.name for p in (tmp_path / "remote" / "published").iterdir()) == ["step-1", "step-2"]


@pytest.mark.model
def test_a_dead_server_stops_training_with_one_error_before_a_step_is_lost(tmp_path, small_browser, monkeypatch):
    sleeps = []
    monkeypatch.setattr("research_agent.inference.policy.time.sleep", sleeps.append)  # the backoff, unwaited
    dead = cfg(tmp_path, "dead", rollout_endpoint="http://127.0.0.1:9")
    with pytest.raises(SystemExit, match="generation server at http://127.0.0.1:9.*did not take the adapter"):
        train_rl(dead, browser=small_browser, progress=False)
    assert sleeps and sleeps == sorted(sleeps), "it was retried, with a growing backoff, before the error"
    assert not (tmp_path / "dead" / "checkpoints").exists() or not any((tmp_path / "dead" / "checkpoints").iterdir())
