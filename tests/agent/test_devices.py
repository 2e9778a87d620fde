"""--device / --dtype: one meaning everywhere, CUDA that is not there is one error, bf16 runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from research_agent.inference.devices import (
    DeviceError,
    model_device,
    resolve_device,
    resolve_dtype,
    use_device,
)

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = not torch.cuda.is_available()


def test_auto_is_the_cpu_in_float32_without_a_gpu_and_names_are_checked():
    if NO_CUDA:
        assert resolve_device("auto").type == "cpu"
        assert resolve_dtype("auto", resolve_device("auto")) == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16 and resolve_dtype("auto", "cpu") == torch.float32
    with pytest.raises(DeviceError, match="use auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
    with pytest.raises(DeviceError, match="float32, bfloat16"):
        resolve_dtype("int8")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a GPU")
def test_cuda_where_there_is_none_is_one_error_before_anything_loads(tmp_path):
    with pytest.raises(DeviceError, match="sees no CUDA GPU"):
        use_device("cuda:0")
    env = {"PATH": "/usr/bin:/bin", "RESEARCH_AGENT_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    for argv in (["research_agent.ask", "What is the capital of Peru?", "--device", "cuda"],
                 ["research_agent.train", "--device", "cuda", "--steps", "1", "--out", str(tmp_path / "t")],
                 ["eval", "qa", "--bench", "factbook-test", "--out", str(tmp_path / "e"), "--device", "cuda:1"]):
        r = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode != 0 and "sees no CUDA GPU" in r.stderr and "Traceback" not in r.stderr, argv
        assert not (tmp_path / "cache" / "corpora").exists(), "nothing was built for a device that is not there"


@pytest.mark.model
def test_bfloat16_generation_matches_between_the_cached_and_plain_decode_paths():
    from research_agent.inference.policy import load_policy

    cached = load_policy("smollm2-135m", device="cpu", dtype="bfloat16", progress=False)
    assert next(cached.model.parameters()).dtype == torch.bfloat16 and model_device(cached.model).type == "cpu"
    plain = load_policy("smollm2-135m", device="cpu", dtype="bfloat16", progress=False, cache_mb=0)
    prompts = [cached.tokenizer.encode("The capital of France is"), cached.tokenizer.encode("One, two, three,")]
    a = cached.generate(prompts, max_new_tokens=8)
    b = plain.generate(prompts, max_new_tokens=8)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(len(g.token_ids) == 8 or g.finish_reason == "eos" for g in a)


@pytest.mark.model
def test_sft_in_bfloat16_keeps_the_lora_weights_in_float32_and_learns(tmp_path):
    from research_agent.train.config import TrainConfig
    from research_agent.train.sft import train_sft

    rec = {"question": "What is the capital of France?", "template": "fast", "turns": [
        {"completion": "<search>capital of France</search>",
         "observation": "\n<result>\n[factbook/fr#0] France: Capital: Paris\n</result>\n"},
        {"completion": "<answer>Paris [factbook/fr#0]</answer>", "observation": ""}]}
    data = tmp_path / "sft.jsonl"
    data.write_text("\n".join(json.dumps(rec) for _ in range(4)) + "\n")
    cfg = TrainConfig(stage="sft", tasks=str(data), out=str(tmp_path / "sft"), epochs=3, lr=2e-3,
                      compute={"micro_batch": 2, "device": "cpu", "dtype": "bfloat16"}, checkpoints={"every": 100})
    train_sft(cfg, progress=False)
    losses = [json.loads(x)["loss"] for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert all(x == x for x in losses) and losses[-1] < losses[0] * 0.8
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "sft" / "adapter" / "adapter_model.safetensors"))
    assert weights and all(w.dtype == torch.float32 for w in weights.values())
    assert json.loads((tmp_path / "sft" / "config.json").read_text())["compute"]["dtype"] == "bfloat16"
