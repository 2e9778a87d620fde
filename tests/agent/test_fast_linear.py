"""Decoding through merged LoRA weights and oneDNN kernels: the policy's tokens stay, its weights untouched."""

from contextlib import contextmanager
from functools import partial

import pytest
import torch

from research_agent.inference import fast_linear
from research_agent.inference.fast_linear import DecodeLayers
from research_agent.inference.policy import LocalPolicy
from research_agent.inference.prefix_cache import sample
from tests.decoding import INT8_GAP, INT8_KEPT, PROMPTS, greedy_kept, int8_error, next_step_logits


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


def test_int8_linear_is_close_at_decode_sizes_and_exact_for_prefills():
    import torch.nn.functional as F

    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(1536, 576, generator=gen) * 0.05, torch.randn(1536, generator=gen)
    calib = torch.randn(64, 576, generator=gen)
    calib[:, 7] *= 40  # an outlier channel, as transformers have
    reduce = fast_linear._reduce_range()  # as DecodeLayers picks it on this CPU
    bits = 7 if reduce else 8  # the kernel's input grid on this CPU
    ref_c = F.linear(calib, w, b)
    packed, inv, outliers, err = fast_linear.smooth_int8(w, b, calib, ref_c, reduce)
    assert outliers is None  # smoothing alone was enough: no float32 channels
    # as close as rounding the smoothed operands (x / s, w * s) to int8 allows: 1.2x that measured
    # (0.023 with 7-bit inputs), a 10% wrong input scale is 4x it (0.096)
    assert err < 2 * int8_error(w / inv, calib * inv, bits) / ref_c.norm()
    # without the smoothing the outlier channel takes the 8 bits from the others (0.19 vs 0.023)
    plain = torch.ops.quantized.linear_dynamic(calib, fast_linear.pack_int8(w, b), reduce)
    assert ((plain - ref_c).norm() / ref_c.norm()).item() > 2 * err
    fn = partial(fast_linear._int8_linear, packed, inv, lambda x: F.linear(x, w, b), reduce)
    x = torch.randn(3, 576, generator=gen)
    x[:, 7] *= 40
    ref = F.linear(x, w, b)
    got = fn(x)
    assert got.shape == ref.shape and not torch.equal(got, ref)  # int8 arithmetic, not the float path
    assert (got - ref).norm() < 2 * int8_error(w / inv, x * inv, bits)
    assert fn(x[None]).shape == (1, 3, 1536)  # a [batch, 1, hidden] decode step keeps its shape
    many = torch.randn(fast_linear.INT8_MAX_ROWS + 1, 576, generator=gen)
    assert torch.equal(fn(many), F.linear(many, w, b))  # a prefill keeps the float32 weights


def _int8_policy_layers(model, tok):
    return DecodeLayers(quantize="int8", calibration=tok.encode(fast_linear.CALIBRATION_TEXT))


def test_int8_decode_keeps_the_next_token_and_follows_an_update(lora_model):
    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    model, tok = lora_model
    rows = [tok.encode(p) for p in PROMPTS]
    int8 = _int8_policy_layers(model, tok)
    versions = [p._version for p in model.parameters()]

    def logits(layers):
        with torch.no_grad(), layers.applied(model):
            names = [m.forward.func.__name__ for m in model.modules() if "forward" in m.__dict__]
            return next_step_logits(model, rows, tok.pad_token_id), names

    ref, _ = logits(DecodeLayers())
    got, names = logits(int8)
    errors = int8.int8_errors
    layers = model.config.num_hidden_layers
    assert len(errors) == 7 * layers + 1  # every matrix of every layer and the LM head was calibrated
    kept = sum(e > fast_linear.INT8_MAX_ERROR for e in errors.values())
    assert names.count("_int8_linear") == len(errors) - kept >= 6 * layers  # the rest stay float32
    # float32's greedy tokens, or near ties broken the other way (a random adapter this large is far
    # from a trained model, and each CPU's int8 kernel rounds its own way)
    share, gap = greedy_kept(got, ref)
    assert share >= INT8_KEPT and gap < INT8_GAP, (share, gap)
    assert [p._version for p in model.parameters()] == versions and _replaced(model) == 0
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    try:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.mul_(-3.0)
        ref_after, _ = logits(DecodeLayers())
        got_after, _ = logits(int8)  # re-calibrated on the updated merged weights, not the old copies
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in saved:
                    p.copy_(saved[n])
    assert greedy_kept(ref_after, ref)[0] < 1  # the update changes tokens, or this proves nothing
    share_after, gap_after = greedy_kept(got_after, ref_after)
    assert share_after >= INT8_KEPT and gap_after < INT8_GAP, (share_after, gap_after)
    # it follows the update: int8 over the stale weights would keep fewer of the new model's tokens
    assert share_after > greedy_kept(got, ref_after)[0]


def test_int8_policy_generates_through_the_quantized_layers(lora_model):
    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    model, tok = lora_model
    pol = LocalPolicy(model, tok, quantize="int8")
    assert pol.quantize == "int8" and pol._decode.calibration == tok.encode(fast_linear.CALIBRATION_TEXT)
    calls = []
    real = fast_linear._int8_linear

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    fast_linear._int8_linear = counted
    try:
        out = pol.generate([tok.encode("The capital of France is")], max_new_tokens=6)
    finally:
        fast_linear._int8_linear = real
    assert len(out[0].token_ids) == 6 and calls
    assert _replaced(model) == 0


def test_quantize_setting_is_checked_and_the_kernel_matches_the_cpu(monkeypatch):
    with pytest.raises(ValueError, match="int4.*none, int8"):
        DecodeLayers(quantize="int4")
    if fast_linear.int8_available():
        assert DecodeLayers(quantize=" INT8 ", calibration=[1, 2]).quantize == "int8"
        with pytest.raises(ValueError, match="calibration"):
            DecodeLayers(quantize="int8")
    monkeypatch.setattr(fast_linear, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert fast_linear._reduce_range()  # no VNNI: 7-bit activations, no int16 saturation
    monkeypatch.setattr(fast_linear, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    assert not fast_linear._reduce_range()
    monkeypatch.undo()
    assert "fpu" in fast_linear.cpu_flags()  # read from this machine's /proc/cpuinfo


def test_quantize_flag_gives_a_clear_error():
    import argparse

    from research_agent.inference.devices import add_device_flags

    p = argparse.ArgumentParser(prog="ask")
    add_device_flags(p, quantize=True)
    assert p.parse_args([]).quantize == "none"
    assert p.parse_args(["--quantize", "int8"]).quantize == "int8"
    with pytest.raises(SystemExit):
        p.parse_args(["--quantize", "fp8"])
    train = argparse.ArgumentParser()
    add_device_flags(train)  # the trainer has no such flag: its rollouts decode with the trained weights
    assert not hasattr(train.parse_args([]), "quantize")


def test_an_int8_evaluation_is_labelled_and_a_float32_one_keeps_its_old_identity():
    import argparse

    from eval.cli import _run_info

    base = dict(limit=200, seed=0, bench_file=None, retriever="hybrid", corpus=None)
    assert _run_info(argparse.Namespace(**base, quantize="int8"))["quantize"] == "int8"
    assert "quantize" not in _run_info(argparse.Namespace(**base, quantize="none"))  # resumes runs made before
