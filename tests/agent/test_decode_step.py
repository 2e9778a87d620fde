"""The lean decode step: the same logits and tokens as ``model(...)``, through every layer swap."""

from functools import partial

import pytest
import torch

from research_agent.inference import decode_step, fast_linear
from research_agent.inference.fast_linear import DecodeLayers
from research_agent.inference.policy import LocalPolicy
from tests.decoding import int8_error
from tests.decoding import prefill as _prefill

LORA_SEED = 5  # the shared lora_model fixture (tests/agent/conftest.py) with this seed


@pytest.mark.parametrize("layers", ["plain", "merged"])
def test_a_step_gives_the_models_logits_on_a_padded_batch(lora_model, layers):
    model, tok = lora_model
    assert decode_step.supported(model)
    rows = [tok.encode("The capital of France is"), tok.encode("Name three rivers of Africa: the Nile,"),
            tok.encode("2 + 2 =")]
    pad = tok.pad_token_id
    with torch.no_grad(), (DecodeLayers().applied(model) if layers == "merged" else _nothing()):
        ref_cache, attn, nxt = _prefill(model, rows, pad)
        lean_cache, _, _ = _prefill(model, rows, pad)
        pos = attn.sum(-1, keepdim=True)
        for _ in range(4):  # a few steps: the appended keys/values must be right too
            attn = torch.cat([attn, torch.ones((len(rows), 1), dtype=attn.dtype)], dim=1)
            ref = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=pos, cache=ref_cache,
                        use_cache=True, logits_to_keep=1).logits[:, -1]
            got = decode_step.decode_step(model, nxt[:, None], attn, pos, lean_cache)
            assert got.shape == ref.shape
            assert torch.allclose(got, ref, atol=2e-4, rtol=1e-4), (got - ref).abs().max()
            assert torch.equal(got.argmax(-1), ref.argmax(-1))
            nxt, pos = ref.argmax(-1), pos + 1
        for a, b in zip(ref_cache.layers, lean_cache.layers, strict=True):
            assert torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_policy_decodes_through_it_with_the_same_tokens(lora_model, monkeypatch):
    model, tok = lora_model
    pol = LocalPolicy(model, tok)
    prompts = [tok.encode("Count from one to ten: one, two,"), tok.encode("The largest ocean is the")]
    calls = []
    real = decode_step.decode_step

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode_step, "decode_step", counted)

    def run(flag):
        monkeypatch.setenv("RESEARCH_AGENT_FAST_DECODE", flag)
        pol.cache.clear()
        return pol.generate(prompts, max_new_tokens=20)

    slow = run("0")
    assert not calls  # switched off: every step went through model(...)
    fast = run("1")
    assert calls  # and on by default
    assert [g.token_ids for g in fast] == [g.token_ids for g in slow]
    for a, b in zip(fast, slow, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_models_of_another_shape_are_not_taken():
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64))
    assert not decode_step.supported(gpt2)
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
    assert decode_step.supported(Qwen2ForCausalLM(Qwen2Config(**small)))
    sliding = Qwen2ForCausalLM(Qwen2Config(**small, use_sliding_window=True, sliding_window=8, max_window_layers=0))
    assert not decode_step.supported(sliding)


def test_a_qwen2_step_with_biases_matches_the_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                         max_position_embeddings=128)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # q/k/v biases, zero at init: make them count
                p.normal_(0, 0.5)
        ref_cache, attn, nxt = _prefill(model, [[5, 6, 7, 8], [9, 10]], 0)
        lean_cache, _, _ = _prefill(model, [[5, 6, 7, 8], [9, 10]], 0)
        attn = torch.cat([attn, torch.ones((2, 1), dtype=attn.dtype)], dim=1)
        pos = attn.sum(-1, keepdim=True) - 1
        ref = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=pos, cache=ref_cache,
                    use_cache=True).logits[:, -1]
        got = decode_step.decode_step(model, nxt[:, None], attn, pos, lean_cache)
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()


def test_int8_groups_compute_qkv_and_gate_up_in_one_call(lora_model):
    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    model, tok = lora_model
    layers = DecodeLayers(quantize="int8", calibration=tok.encode(fast_linear.CALIBRATION_TEXT))
    lm = model.get_base_model()
    attn, mlp = lm.model.layers[3].self_attn, lm.model.layers[3].mlp
    h = torch.randn(1, 1, lm.config.hidden_size)
    eye = torch.eye(lm.config.hidden_size)
    with torch.no_grad():
        with DecodeLayers().applied(model):
            ref = torch.cat([attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)], dim=-1)
            ref_mlp = torch.cat([mlp.gate_proj(h), mlp.up_proj(h)], dim=-1)
            # the float32 matrices side by side (LoRA merged): what the groups quantized
            weights = [torch.cat([m(eye) - m(0 * eye[:1]) for m in ms], dim=-1).T for ms in
                       ((attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj))]
        with layers.applied(model):
            qkv, gate_up = attn.q_proj.decode_group, mlp.gate_proj.decode_group
            assert qkv.members == (attn.q_proj, attn.k_proj, attn.v_proj)
            assert gate_up.members == (mlp.gate_proj, mlp.up_proj)
            assert sum(qkv.widths) == ref.shape[-1]
            got, got_mlp = qkv(h), gate_up(h)
            invs = [qkv.int8.inv, gate_up.int8.inv]
            assert qkv.__class__.__name__ == "DecodeGroup" and decode_step._group(attn.q_proj, qkv.members) is qkv
            assert decode_step._group(attn.q_proj, (attn.q_proj, attn.k_proj)) is None  # not the same members
            many = torch.randn(1, fast_linear.INT8_MAX_ROWS + 4, lm.config.hidden_size)
            assert qkv(many).shape == (1, many.shape[1], ref.shape[-1])  # a prefill: each member's own path
        assert "decode_group" not in attn.q_proj.__dict__  # gone once the block ends
    bits = 7 if fast_linear._reduce_range() else 8
    for a, b, w, inv in ((got, ref, weights[0], invs[0]), (got_mlp, ref_mlp, weights[1], invs[1])):
        # int8 (channels with inv 0 are the float32 outliers: out of the int8 product), as close as its
        # rounding of the smoothed operands allows
        kept = inv != 0
        scaled_w = torch.where(kept, w / inv.where(kept, 1), 0)
        assert not torch.equal(a, b) and (a - b).norm() < 2 * int8_error(scaled_w, h * inv, bits)


def test_smoothing_falls_back_to_float32_outlier_channels():
    import torch.nn.functional as F

    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(256, 512, generator=gen) * 0.05
    calib = torch.randn(48, 512, generator=gen)
    calib[:, [3, 99, 200]] *= 300  # channels far beyond what smoothing spreads over 8 bits
    ref = F.linear(calib, w)
    plain = fast_linear.smooth_int8(w, None, calib, ref, False, max_error=1.0)  # accepts the first try
    packed, inv, outliers, err = fast_linear.smooth_int8(w, None, calib, ref, False, max_error=0.0)
    assert plain[2] is None and outliers is not None
    idx, cols = outliers
    assert len(idx) == fast_linear.OUTLIER_CHANNELS and {3, 99, 200} <= set(idx.tolist())
    assert cols.shape == (len(idx), 256) and torch.all(inv[idx] == 0)
    assert err < plain[3]
    fn = partial(fast_linear._int8_linear, packed, inv, lambda x: F.linear(x, w), False, outliers=outliers)
    got = fn(calib[:4])
    assert ((got - ref[:4]).norm() / ref[:4].norm()).item() < 2 * err + 1e-3


@pytest.mark.model
def test_an_adapter_added_after_a_generation_is_decoded_through(monkeypatch):
    """A model generated with, then wrapped by peft: the next generation must see the LoRA layers."""
    from peft import LoraConfig, get_peft_model

    from research_agent.inference.models import load_model

    model, tok = load_model("smollm2-135m", progress=False)
    prompt = [tok.encode("The area of Chad is")]
    LocalPolicy(model, tok).generate(prompt, max_new_tokens=4)  # a step plan over the plain layers
    torch.manual_seed(0)
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            lora_dropout=0.0, init_lora_weights=False))
    try:
        plain = LocalPolicy(lora, tok, prefix_cache=False).generate(prompt, max_new_tokens=12)[0]
        cached = LocalPolicy(lora, tok).generate(prompt, max_new_tokens=12)[0]
    finally:
        lora.unload()
    assert cached.token_ids == plain.token_ids
    assert cached.logprobs == pytest.approx(plain.logprobs, abs=1e-3)
