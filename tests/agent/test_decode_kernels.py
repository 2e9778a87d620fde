"""The compiled decode kernels: each one against the torch ops it replaces, the decode step through
them against the step without them (float32 and int8), and the build's failure and opt-out paths."""

import logging

import pytest
import torch
import torch.nn.functional as F

from research_agent.inference import decode_kernels as K
from research_agent.inference import decode_step, fast_linear
from research_agent.inference.fast_linear import DecodeLayers
from research_agent.inference.policy import LocalPolicy
from tests.decoding import INT8_GAP, INT8_KEPT, PROMPTS, greedy_kept, sum_rtol, unit_roundoff
from tests.decoding import prefill as _prefill

LORA_SEED = 5


@pytest.fixture(scope="module")
def lib():
    built = K.library()
    if built is None:
        pytest.skip("no C compiler here: decode_step runs torch's ops")
    return built


def _rms(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def test_add_rms_norm_adds_the_residual_and_gathers_the_kept_channels(lib):
    gen = torch.Generator().manual_seed(0)
    x, delta = torch.randn(3, 576, generator=gen) * 4, torch.randn(3, 576, generator=gen)
    w, inv = torch.rand(576, generator=gen) + 0.5, torch.rand(576, generator=gen) + 0.1
    idx = torch.tensor([7, 100, 575])
    want_x = x + delta
    want = _rms(want_x, w, 1e-5)
    got_x, out, kept = x.clone(), torch.empty_like(x), torch.empty(3, 3)
    K.add_rms_norm(lib, got_x, delta, (w * inv).contiguous(), 1e-5, out, idx, w[idx].contiguous(), kept)
    assert torch.equal(got_x, want_x)  # the residual lands in x itself
    # The kernel sums the squares in double, torch in float32 in its own order (SIMD width, CPU): at
    # most sum_rtol(576) apart, which the square root halves; each output is then a product (x * s * w,
    # * inv), so the error is relative to it, plus the dozen single roundings of the two sides (squares,
    # the mean, sqrt, division, the products).  A mean over n - 1, or a square left out, is 1 / 576
    # off: 50 times this.
    rtol = sum_rtol(576) / 2 + 16 * unit_roundoff()
    assert torch.allclose(out, want * inv, rtol=rtol, atol=0)
    assert torch.allclose(kept, want[:, idx], rtol=rtol, atol=0)  # unscaled, as int8's outliers need
    plain = torch.empty_like(x)
    K.add_rms_norm(lib, want_x.clone(), None, w, 1e-5, plain)  # no residual, no scale, no channels
    assert torch.allclose(plain, want, rtol=rtol, atol=0)


def test_rope_rotates_only_the_first_heads_in_place(lib):
    gen = torch.Generator().manual_seed(1)
    rows, hd, heads, total = 2, 64, 3, 5
    t = torch.randn(rows, total * hd, generator=gen)
    angle = torch.rand(rows, hd // 2, generator=gen) * 6
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    heads_t = t.view(rows, total, hd)
    half = hd // 2
    rotate = torch.cat((-heads_t[..., half:], heads_t[..., :half]), dim=-1)
    want = heads_t * cos[:, None] + rotate * sin[:, None]
    got = t.clone()
    K.rope(lib, got, heads, hd, cos, sin)
    got = got.view(rows, total, hd)
    assert torch.equal(got[:, :heads], want[:, :heads])  # the same ops in the same order: bit for bit
    assert torch.equal(got[:, heads:], heads_t[:, heads:])  # v's heads untouched


def test_silu_mul_reads_a_side_by_side_projection_and_scales(lib):
    gen = torch.Generator().manual_seed(2)
    y = torch.randn(4, 2 * 1536, generator=gen) * 3
    g, u = y[:, :1536], y[:, 1536:]  # views: rows 3072 floats apart, as gate/up's one int8 call
    scale = torch.rand(1536, generator=gen)
    out = torch.empty(4, 1536)
    K.silu_mul(lib, g, u, scale, out)
    # No sum: each side is exp (within one unit in the last place, 2u, in libm and in torch's vector
    # code alike), 1 + e, a division and two products, 6u from the exact value, so 12u apart, relative
    # to the value whatever its size (no cancellation: 1 + e adds two positive numbers)
    rtol = 16 * unit_roundoff()
    assert torch.allclose(out, F.silu(g) * u * scale, rtol=rtol, atol=0)
    K.silu_mul(lib, g, u, None, out)
    assert torch.allclose(out, F.silu(g) * u, rtol=rtol, atol=0)


def _greedy(pol, prompts, n=24):
    return [g.token_ids for g in pol.generate(prompts, max_new_tokens=n)]


def test_generation_through_the_kernels_matches_the_torch_ops(lora_model, lib, monkeypatch):
    model, tok = lora_model
    pol = LocalPolicy(model, tok)
    prompts = [tok.encode("The capital of France is"), tok.encode("Name three rivers of Africa: the Nile,")]
    used = []
    real = decode_step._kernel_step
    monkeypatch.setattr(decode_step, "_kernel_step", lambda *a: used.append(1) or real(*a))
    fast = _greedy(pol, prompts)
    assert used  # the kernels ran
    monkeypatch.setenv("RESEARCH_AGENT_DECODE_KERNELS", "0")
    monkeypatch.setattr(K, "_tried", False)
    monkeypatch.setattr(K, "_lib", None)
    used.clear()
    assert _greedy(pol, prompts) == fast and not used


def test_an_int8_step_folds_the_input_scales_and_stays_close(lora_model, lib):
    """int8 rounds each input to 7 or 8 bits, so a last-bit difference before it (the scale folded into
    the norm's weight) can move a value by a rounding step: the kernels' int8 step is not the torch
    ops' int8 step bit for bit, and how far apart they land depends on the CPU's int8 kernel (0.9957
    cosine on both an AMD EPYC with VNNI and an Intel Xeon with AMX, where a 0.999 bound once failed).
    So both are held to float32 over sixteen prompts: the kernels to no more error than torch's own
    int8 step makes plus one rounding step, and both to float32's greedy tokens (``greedy_kept``)."""
    if not fast_linear.int8_available():
        pytest.skip("this torch build has no x86 int8 linear kernel")
    model, tok = lora_model
    layers = DecodeLayers(quantize="int8", calibration=tok.encode(fast_linear.CALIBRATION_TEXT))
    rows = [tok.encode(p) for p in PROMPTS]
    assert len(rows) <= fast_linear.INT8_MAX_ROWS  # one int8 step for all of them

    def step(fn, steps):
        cache, attn, nxt = _prefill(model, rows, tok.pad_token_id)
        attn = torch.cat([attn, torch.ones((len(rows), 1), dtype=attn.dtype)], dim=1)
        return fn(steps, nxt[:, None], attn, attn.sum(-1, keepdim=True) - 1, cache)

    calls = []
    real = fast_linear.Int8Form.prescaled
    with torch.no_grad():
        with DecodeLayers().applied(model):
            want = step(decode_step._torch_step, decode_step.plan(model))
        with layers.applied(model):
            steps = decode_step.plan(model)
            assert steps.kernels is lib
            folded = [f for f in steps.fused if f[1].form is not None]
            assert folded and all(not torch.equal(f[1].folded, f[1].weight) for f in folded)
            fast_linear.Int8Form.prescaled = lambda self, *a: calls.append(1) or real(self, *a)
            try:
                got = step(decode_step._kernel_step, steps)
            finally:
                fast_linear.Int8Form.prescaled = real
            ops = step(decode_step._torch_step, steps)
    assert len(calls) >= 2 * model.config.num_hidden_layers  # q/k/v and gate/up at least, scale folded
    bits = 7 if fast_linear._reduce_range() else 8  # AVX2 alone (AMD EPYC): 7-bit inputs
    rounding = 2.0 ** (1 - bits)  # one int8 step, relative to the largest input of its tensor

    def error(x):  # relative L2 distance of the sixteen rows' logits from float32's
        return ((x - want).norm() / want.norm()).item()

    assert error(got) <= 2 * error(ops) + rounding, (error(got), error(ops))
    for x in (got, ops):
        kept, gap = greedy_kept(x, want)
        assert kept >= INT8_KEPT and gap < INT8_GAP, (kept, gap)


def test_a_failed_build_warns_once_and_decoding_goes_on(monkeypatch, tmp_path, caplog, smol):
    monkeypatch.setenv("RESEARCH_AGENT_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    monkeypatch.setattr(K, "_tried", False)
    monkeypatch.setattr(K, "_lib", None)
    with caplog.at_level(logging.WARNING, logger=K.__name__):
        assert K.library() is None and K.library() is None
    assert sum("decode kernels not built" in r.getMessage() for r in caplog.records) == 1
    assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-written left behind
    model, tok = smol
    with torch.no_grad():
        assert decode_step.plan(model).kernels is None
    assert len(LocalPolicy(model, tok).generate([tok.encode("Hello")], max_new_tokens=3)[0].token_ids) == 3


def test_the_build_is_named_by_this_cpu_and_reused(monkeypatch, tmp_path, lib):
    monkeypatch.setenv("RESEARCH_AGENT_CACHE", str(tmp_path))
    for fresh in (True, False):
        monkeypatch.setattr(K, "_tried", False)
        monkeypatch.setattr(K, "_lib", None)
        assert K.library() is not None
        path = K.library_path(K._compiler())
        assert path.exists() and path.parent == tmp_path / "kernels"
        if fresh:
            stamp = path.stat().st_mtime_ns
    assert path.stat().st_mtime_ns == stamp  # the second process-start loaded it, not rebuilt it
    monkeypatch.setattr(K, "_cpu_key", lambda: "another CPU")
    assert K.library_path(K._compiler()) != path  # another machine's entry: never this build
