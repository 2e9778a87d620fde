"""Decoding through merged LoRA weights and oneDNN kernels: the policy's tokens stay, its weights untouched."""

from contextlib import contextmanager

import pytest
import torch

from research_agent import fast_linear
from research_agent.fast_linear import DecodeLayers
from research_agent.policy import LocalPolicy
from research_agent.prefix_cache import sample


@pytest.fixture(scope="module")
def lora_model():
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import setup_lora

    model, tok = setup_lora(TrainConfig(model="smollm2-135m"), progress=False)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # a fresh adapter is a no-op (B = 0): give it an effect
                p.normal_(0, 0.05, generator=gen)
    model.eval()
    return model, tok


@contextmanager
def _plain(model):
    yield


def _replaced(model) -> int:
    return sum(1 for m in model.modules() if "forward" in m.__dict__)


def _generate(model, tok, merged: bool, steps: int = 24):
    pol = LocalPolicy(model, tok)
    if not merged:  # the reference: peft's own layers and MKL everywhere
        pol._decode.applied = _plain
    prompts = [tok.encode("The capital of France is"), tok.encode("def add(a, b):")]
    return pol.generate(prompts, max_new_tokens=steps)


def test_merged_decode_matches_the_adapter_and_leaves_weights_alone(lora_model, monkeypatch):
    model, tok = lora_model
    monkeypatch.setenv("RESEARCH_AGENT_ONEDNN", "1")  # the oneDNN kernels too, whatever this CPU's default
    versions = [p._version for p in model.parameters()]
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "q_proj.base_layer" in n}
    plain = _generate(model, tok, merged=False)
    merged = _generate(model, tok, merged=True)
    assert [g.token_ids for g in merged] == [g.token_ids for g in plain]
    for a, b in zip(merged, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    # the adapter matters here, so matching it is not matching the base model
    with model.disable_adapter():
        base = _generate(model, tok, merged=True)
    assert [g.token_ids for g in base] != [g.token_ids for g in plain]
    assert [p._version for p in model.parameters()] == versions  # the prefix cache's fingerprint holds
    for n, p in model.named_parameters():
        if n in before:
            assert torch.equal(p, before[n])
    assert _replaced(model) == 0


def test_onednn_is_the_default_only_off_intel(monkeypatch):
    monkeypatch.delenv("RESEARCH_AGENT_ONEDNN", raising=False)
    monkeypatch.setattr(fast_linear, "cpu_vendor", lambda: "GenuineIntel")
    assert not fast_linear.onednn_wanted()
    monkeypatch.setattr(fast_linear, "cpu_vendor", lambda: "AuthenticAMD")
    assert fast_linear.onednn_wanted()
    monkeypatch.setenv("RESEARCH_AGENT_ONEDNN", "0")
    assert not fast_linear.onednn_wanted()
    monkeypatch.setenv("RESEARCH_AGENT_ONEDNN", "1")
    monkeypatch.setattr(fast_linear, "cpu_vendor", lambda: "GenuineIntel")
    assert fast_linear.onednn_wanted()
    vendor = open("/proc/cpuinfo").read().split("vendor_id", 1)[1].split(":", 1)[1].split("\n", 1)[0].strip()
    monkeypatch.undo()
    assert fast_linear.cpu_vendor() == vendor


def test_layers_are_replaced_only_inside_the_block_and_only_for_decoding(lora_model, monkeypatch):
    model, _ = lora_model
    merged = DecodeLayers()
    layers = model.config.num_hidden_layers
    monkeypatch.setenv("RESEARCH_AGENT_ONEDNN", "1")  # forced: this machine's CPU decides the default
    with torch.no_grad(), merged.applied(model):  # q_proj, v_proj merged; the MLPs and the LM head on oneDNN
        assert _replaced(model) == 2 * layers + 3 * layers + 1
        assert model.get_output_embeddings().forward.func.__name__ == "_onednn_linear"
        mlp = model.get_base_model().model.layers[0].mlp
        assert {m.forward.func.__name__ for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)} == {"_onednn_linear"}
        attn = model.get_base_model().model.layers[0].self_attn
        assert "forward" not in attn.k_proj.__dict__  # 192 x 576: faster on MKL
    assert _replaced(model) == 0
    monkeypatch.setenv("RESEARCH_AGENT_ONEDNN", "0")
    with torch.no_grad(), merged.applied(model):
        assert _replaced(model) == 2 * model.config.num_hidden_layers
    assert _replaced(model) == 0
    with merged.applied(model):  # gradients on: training needs the real layers
        assert _replaced(model) == 0
    model.train()
    try:
        with torch.no_grad(), merged.applied(model):  # dropout on
            assert _replaced(model) == 0
    finally:
        model.eval()


def test_merged_weights_follow_an_adapter_update(lora_model):
    model, tok = lora_model
    pol = LocalPolicy(model, tok)
    prompt = [tok.encode("The capital of France is")]
    first = pol.generate(prompt, max_new_tokens=12)
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    try:
        with torch.no_grad():  # an in-place update, as an optimizer step makes
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.mul_(-3.0)
        after = pol.generate(prompt, max_new_tokens=12)
        pol._decode.applied = _plain
        pol.cache.clear()
        unmerged = pol.generate(prompt, max_new_tokens=12)
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in saved:
                    p.copy_(saved[n])
    assert after[0].token_ids == unmerged[0].token_ids
    assert after[0].token_ids != first[0].token_ids


def test_sample_draws_from_the_distribution_and_never_a_zero_entry():
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0]] * 4)
    counts = torch.zeros(5)
    for _ in range(5000):
        counts += torch.bincount(sample(probs), minlength=5)
    freq = counts / counts.sum()
    assert counts[1] == 0 and counts[4] == 0
    assert freq.tolist() == pytest.approx([0.1, 0.0, 0.6, 0.3, 0.0], abs=0.01)
    # unnormalised rows (softmax output in float32 can sum to 1 ± 1e-7) are handled by the row's total
    assert sample(torch.tensor([[0.0, 2.0]])).item() == 1
