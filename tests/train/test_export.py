"""``train export``: a chained RL adapter becomes one plain peft adapter (and a merged model) that
loads without our chain code and gives the logits our loader gives.

The chain is built the way the trainer builds it (merge the chain, add a LoRA, ``save_adapter`` with
``merged_chain``), three deep, with rsLoRA, a rank_pattern, an alpha_pattern and modules only some
adapters target, so every scaling path and the zero blocks are exercised.  lora_B is random: with
peft's zero init every export would trivially match the base.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from research_agent.inference.adapters import AdapterError, adapter_chain, load_adapter, save_adapter
from research_agent.train.__main__ import main
from research_agent.train.export import UPSTREAM, export_adapter

TEXTS = ["The capital of France is Paris.", "def add(a, b):\n    return a + b", "Bern borders Italy, Austria and France."]
ADAPTERS = [  # (name, LoraConfig kwargs): SFT, then two RL rounds on top
    ("sft", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])),
    ("rl1", dict(r=8, lora_alpha=16, use_rslora=True, target_modules=["q_proj", "k_proj"],
                 rank_pattern={"k_proj": 2}, alpha_pattern={"layers.0.self_attn.q_proj": 3})),
    ("rl2", dict(r=2, lora_alpha=4, target_modules=["v_proj", "o_proj"])),
]


def fresh_base():
    from transformers import AutoModelForCausalLM

    from research_agent.inference.models import resolve_model_dir

    return AutoModelForCausalLM.from_pretrained(resolve_model_dir("smollm2-135m", progress=False),
                                                dtype=torch.float32).eval()


def logits(model, tok) -> torch.Tensor:
    """Logits of TEXTS cut to one length: one unpadded batch, one forward pass (CPU time is scarce)."""
    ids = [tok.encode(t) for t in TEXTS]
    with torch.no_grad():
        return model(input_ids=torch.tensor([i[:min(map(len, ids))] for i in ids])).logits


def same(x, y, atol=1e-4) -> bool:
    return torch.allclose(x, y, atol=atol)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """(directory of the last adapter, its logits through ``load_adapter``, the tokenizer)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    from research_agent.inference.models import resolve_model_dir

    tok = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m", progress=False))
    root = tmp_path_factory.mktemp("chain")
    gen = torch.Generator().manual_seed(0)
    model, merged = None, []
    for name, kwargs in ADAPTERS:
        # what setup_lora does: the chain so far merged into the base, recorded in merged_chain (the
        # previous model merged in memory is merge_adapter_chain's result, without reloading the chain)
        base = fresh_base() if model is None else model.merge_and_unload()
        model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **kwargs))
        model.merged_chain = merged
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.data = torch.randn(p.shape, generator=gen) * 0.05
        save_adapter(model, root / name)
        merged = [str(p.resolve()) for p in adapter_chain(root / name)]
    previous = root / ADAPTERS[-1][0]
    reference = logits(load_adapter(fresh_base(), previous).eval(), tok)
    assert not same(reference, logits(fresh_base(), tok), atol=1e-2)  # the adapters change the model
    return previous, reference, tok


@pytest.mark.model
def test_exported_adapter_loads_in_plain_peft_with_the_chains_logits(chain, tmp_path):
    from peft import PeftModel

    adapter, reference, tok = chain
    assert json.loads((adapter / "adapter_chain.json").read_text()) == ["chain/0", "chain/1"]
    assert not same(logits(PeftModel.from_pretrained(fresh_base(), str(adapter)), tok), reference, atol=1e-2)

    out = tmp_path / "portable"
    assert main(["export", "--adapter", str(adapter), "--out", str(out)]) == 0
    assert same(logits(PeftModel.from_pretrained(fresh_base(), str(out)), tok), reference)

    config = json.loads((out / "adapter_config.json").read_text())
    rank = 4 + 8 + 2  # rl1's k_proj rank 2 is zero-padded to its block of 8
    assert (config["r"], config["lora_alpha"], config["use_rslora"], config["use_dora"], config["bias"]) == (
        rank, rank, False, False, "none")
    assert sorted(config["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert config["rank_pattern"] == {} and config["alpha_pattern"] == {}  # vLLM reads neither
    assert config["base_model_name_or_path"] == UPSTREAM["smollm2-135m"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in card and "de-quantized" in card
    assert "--enable-lora" in card and f"portable={out} --max-lora-rank 16" in card
    assert all(str(adapter / "chain" / i) in card for i in "01") and str(adapter.resolve()) in card
    assert not list(tmp_path.glob(".*"))  # no temporary directory left behind


@pytest.mark.model
def test_merged_export_loads_in_plain_transformers_with_the_chains_logits(chain, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter, reference, tok = chain
    out = tmp_path / "merged"
    assert main(["export", "--adapter", str(adapter), "--out", str(out), "--merged"]) == 0
    assert same(logits(AutoModelForCausalLM.from_pretrained(str(out)).eval(), tok), reference)
    assert AutoTokenizer.from_pretrained(str(out)).encode(TEXTS[1]) == tok.encode(TEXTS[1])
    card = (out / "README.md").read_text()
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in card and "de-quantized" in card


@pytest.mark.model
def test_what_cannot_be_exported_exactly_is_refused(chain, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    adapter, _, _ = chain
    for change, message in [({"use_dora": True}, "DoRA"), ({"bias": "all"}, "biases"),
                            ({"init_lora_weights": "pissa"}, "base weights")]:
        bad = tmp_path / "bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(adapter, bad)
        config = json.loads((bad / "adapter_config.json").read_text())
        (bad / "adapter_config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(AdapterError, match=message):
            export_adapter(bad, tmp_path / "out", progress=False)
    (bad / "adapter_config.json").write_text(json.dumps(config))
    first = bad / "chain" / "0"  # a merged lm_head LoRA also moved smollm2's tied input embeddings
    weights = load_file(first / "adapter_model.safetensors")
    save_file({**weights, "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 576),
               "base_model.model.lm_head.lora_B.weight": torch.zeros(49152, 4)}, first / "adapter_model.safetensors")
    with pytest.raises(AdapterError, match="input embeddings"):
        export_adapter(bad, tmp_path / "out", progress=False)
    save_file(weights, first / "adapter_model.safetensors")
    meta = first / "adapter_config.json"  # an earlier adapter on another base
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "base_model_name_or_path": "other/model"}))
    with pytest.raises(AdapterError, match="different base models"):
        export_adapter(bad, tmp_path / "out", progress=False)
    with pytest.raises(AdapterError, match="already exists"):
        export_adapter(adapter, adapter.parent, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_directory_that_is_not_an_adapter_is_one_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not an adapter")
    run = subprocess.run([sys.executable, "-m", "research_agent.train", "export", "--adapter", str(tmp_path),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: {tmp_path} is not a LoRA adapter directory (no adapter_config.json)"
    assert not (tmp_path / "out").exists()
