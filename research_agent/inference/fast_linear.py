"""Faster linear layers for decoding on CPU, without touching the model's weights.

Two things make a CPU decode step slower than it needs to be, and both are fixed here by replacing
layers' ``forward`` for the duration of a ``with`` block (``DecodeLayers``: no gradients, dropout off):

- **LoRA layers** compute ``W x + s · B (A x)``: three matmuls and peft's Python per layer and
  token.  Decoding only needs ``(W + s · B A) x``.  peft's own ``merge_adapter`` writes the sum into
  ``W`` and subtracts it again afterwards, which neither restores ``W`` bit for bit (the frozen base
  — the KL reference — would drift over thousands of rollouts) nor keeps the parameters' version
  counters, which the prefix cache reads to know the weights did not change.  The merged weights
  are separate tensors here, recomputed only when a weight changed (an optimizer step, a load).
- **Large matrices** (the LM head; the MLPs of larger models) run through oneDNN's inner product
  instead of MKL's sgemm, which on this machine's AMD EPYC (MKL's generic path on non-Intel CPUs)
  reads the weights at half the speed.  Measured, fp32, 2 threads, per call: smollm2's LM head
  (49,152 × 576) at 1 / 8 rows 9.6 / 23.5 ms → 5.5 / 12.8 ms; qwen2.5-0.5b's (151,936 × 896)
  37 / 119 → 19 / 52 ms; its MLP matrices (4,864 × 896) 1.2 / 3.2 → 0.6 / 1.6 ms; smollm2's MLP
  gate/up (1,536 × 576) 310 / 528 → 197 / 387 µs (MKL's matrix-vector path runs on one thread here:
  1 and 2 threads take the same time).  Small matrices gain nothing or lose (576 × 576: 109 vs
  115 µs; 192 × 576: 40 vs 67 µs), so only weights of ≥ 512k elements switch.  On an Intel CPU MKL
  takes its own fast path and the swap loses: on a 2-core Xeon (AVX-512, AMX) one row of
  smollm2-135m decoded at 61.7 / 61.3 ms per token through oneDNN against 43.7 / 52.5 through MKL
  (alternating runs), so by default the swap is made only on CPUs not made by Intel.
  ``RESEARCH_AGENT_ONEDNN=1`` forces it, ``=0`` turns it off.

Whole decode (``cached_generate``, 24 sampled tokens after a short prompt, medians of 3–5
interleaved runs, ms per token at 1 / 8 rows): smollm2-135m + LoRA 81 / 157 → 67 / 126 with the
≥ 2M-element rule (LM head only), → 55 / 107 against 65 / 110 for that rule in a later interleaved
run once the MLP matrices switched too (threshold 512k); qwen2.5-coder-0.5b + LoRA 178 / 371 →
124 / 277 (2M rule; the 512k rule, which adds its 896 × 896 q/o, measured 112 / 212 against
102 / 238: within this machine's noise).

Not used in training: the same swap for the frozen LM head in the RL update (forward on oneDNN,
the input's gradient through ``mm``) gave the same gradients and no measurable gain there (2.82 vs
2.86 s per update, medians of 6), where the head is a small part of a many-token pass.

Results equal the plain layers up to float rounding (a different summation order), except with
``quantize="int8"`` (``DecodeLayers``; ``--quantize int8`` of the inference commands): int8 copies of
the large matrices, SmoothQuant-smoothed and calibrated on ``CALIBRATION_TEXT`` (a matrix smoothing cannot
bring within ``INT8_MAX_ERROR`` keeps ``OUTLIER_CHANNELS`` input channels in float32), q/k/v and
gate/up also packed together for ``decode_step`` (``DecodeGroup``), a quarter of the bytes per token; on a 2-core Xeon one row of qwen2.5-coder-0.5b decoded 1.67x faster (smollm2-135m:
from no gain to 0.64x of the float32 time, by run), with SQuAD-open accuracy unchanged
(docs/benchmarks.md#int8-decode).
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from functools import lru_cache, partial

ONEDNN_MIN_ELEMENTS = 1 << 19
INT8_MAX_ROWS = 16  # inputs of more rows (prompt prefills) keep the float32 weights: compute-bound there
INT8_MIN_ELEMENTS = 1 << 16
INT8_MAX_ERROR = 0.03  # a matrix whose int8 output on the calibration text is further off keeps float32
SMOOTHING = (0.5, 0.75)  # SmoothQuant's migration strengths tried per matrix; the closer one is kept
# A matrix still too far off in int8 after smoothing keeps this many input channels (its largest
# activations) in float32 beside the int8 product (LLM.int8()'s decomposition): smollm2-135m's MLP
# down-projections go from 0.030-0.046 to 0.019-0.024 relative error with 16 of 1,536.
OUTLIER_CHANNELS = 16
# What the int8 scales are calibrated on: the agent's own format and some prose, so the activation
# outliers of every channel (large, and the same channels whatever the text) are seen once.
CALIBRATION_TEXT = """You are a research assistant that answers questions using a document collection.
Question: What is the capital of the country that borders both Peru and Brazil to the north?
<search>countries bordering Peru and Brazil</search>
<result>[1] Colombia - Geography: Colombia is bordered to the south by Ecuador and Peru, to the southeast
by Brazil, and to the east by Venezuela. Its capital and largest city is Bogota, at 2,640 m.</result>
<answer>Bogota [1]</answer>
The quick brown fox jumps over the lazy dog. In 1969 two astronauts walked on the Moon while a third
orbited above; the mission returned 21.5 kg of samples. def add(a, b):\n    return a + b
Population: 52,085,168 (2023 est.); area: 1,138,910 sq km; GDP growth 1.6 %. import pandas as pd
df = pd.DataFrame({"x": [1, 2, 3]}); print(df["x"].sum())"""
QUANTIZE = ("none", "int8")


def _vanilla_lora_layers(model) -> list:
    """peft LoRA ``Linear`` layers whose active adapters are plain LoRA (no DoRA or other variant)."""
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # peft not installed: nothing to merge
        return []
    out = []
    for m in model.modules():
        if not isinstance(m, LoraLinear) or m.disable_adapters or m.merged:
            continue
        active = [a for a in m.active_adapters if a in m.lora_A]
        if active and not any(a in getattr(m, "lora_variant", {}) for a in active):
            out.append((m, tuple(active)))
    return out


def _cpuinfo(field: str) -> str:
    """The first ``field`` line of ``/proc/cpuinfo``; empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(field):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


@lru_cache(maxsize=1)
def cpu_vendor() -> str:
    """``vendor_id`` of ``/proc/cpuinfo`` (e.g. GenuineIntel, AuthenticAMD); empty where unknown."""
    return _cpuinfo("vendor_id")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The ``flags`` of ``/proc/cpuinfo``'s first processor; empty where unknown."""
    return frozenset(_cpuinfo("flags").split())


def check_quantize(spec: str) -> str:
    spec = str(spec).strip().lower()
    if spec not in QUANTIZE:
        raise ValueError(f"--quantize {spec!r}: use one of {', '.join(QUANTIZE)}")
    return spec


def int8_available() -> bool:
    """Whether this torch build has the x86 dynamic int8 linear kernel (fbgemm / oneDNN)."""
    import torch

    engines = set(torch.backends.quantized.supported_engines)
    return bool(engines & {"x86", "fbgemm"}) and hasattr(torch.ops.quantized, "linear_dynamic")


def _reduce_range() -> bool:
    # without VNNI, fbgemm sums u8 x s8 pairs into int16 with saturation: 7-bit activations avoid it
    return not (cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})


def pack_int8(weight, bias=None):
    """``weight`` [out, in] as symmetric per-output-channel int8, packed for ``linear_dynamic``."""
    import torch

    w = weight.detach().float()
    scale = (w.abs().amax(dim=1).clamp(min=1e-12) / 127).double()
    zero = torch.zeros(w.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao, not removed
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float())


def smooth_int8(weight, bias, x, out, reduce_range: bool, max_error: float = INT8_MAX_ERROR):
    """The int8 form of one matrix, calibrated on its input ``x`` and float32 output ``out``.

    A few input channels of a transformer carry activations tens of times the rest, and the kernel
    quantizes each input row to 8 bits with one scale, so those channels would crush the others.
    SmoothQuant's fix: divide channel j of the input by s_j = max|x_j|^a / max|W_j|^(1-a) and
    multiply column j of the weight by it (the product is unchanged).  Where that is not enough
    (relative error above ``max_error``), the ``OUTLIER_CHANNELS`` input channels largest after
    smoothing leave the int8 product (their factor in ``1 / s`` is 0, their weight columns are
    zeroed) and are multiplied in float32 instead.  Returns (packed weight, 1 / s, outliers, relative
    error of the int8 output on ``x``) for the best try; ``outliers`` is None or (channel indices,
    their float32 weight columns transposed [k, out])."""
    import torch

    x = x.reshape(-1, x.shape[-1]).float()
    ref = out.reshape(-1, out.shape[-1]).float()
    w = weight.detach().float()
    amax = x.abs().amax(dim=0).clamp(min=1e-5)
    wmax = w.abs().amax(dim=0).clamp(min=1e-5)
    best = None
    for k in (0, min(OUTLIER_CHANNELS, w.shape[1] // 8)):
        if best is not None and (best[3] <= max_error or k == 0):
            break
        for a in SMOOTHING:
            s = (amax ** a / wmax ** (1 - a)).clamp(min=1e-4, max=1e4)
            inv = (1 / s).contiguous()
            ws = w * s
            outliers = None
            if k:
                idx = torch.topk(amax * inv, k).indices.sort().values
                inv[idx] = 0
                ws[:, idx] = 0
                outliers = (idx, w[:, idx].t().contiguous())
            packed = pack_int8(ws, bias)
            got = torch.ops.quantized.linear_dynamic(x * inv, packed, reduce_range)
            if outliers is not None:
                got = got + x.index_select(-1, outliers[0]) @ outliers[1]
            err = ((got - ref).norm() / ref.norm().clamp(min=1e-12)).item()
            if best is None or err < best[3]:
                best = (packed, inv, outliers, err)
    return best


def _int8_ok(weight) -> bool:
    import torch

    return weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.numel() >= INT8_MIN_ELEMENTS


def _int8_linear(packed, inv_scale, exact, reduce_range, x, *args, outliers=None, **kwargs):
    import torch

    if x.numel() > INT8_MAX_ROWS * x.shape[-1] or x.dtype != torch.float32:
        return exact(x)
    y = torch.ops.quantized.linear_dynamic(x * inv_scale, packed, reduce_range)
    if outliers is not None:  # the channels the int8 product leaves out, in float32
        y = y + x.index_select(-1, outliers[0]) @ outliers[1]
    return y


class Int8Form:
    """One int8 matrix as ``decode_step`` calls it when it has applied the input scale itself
    (folded into the RMSNorm weight before q/k/v and gate/up, into SiLU * up before down): the
    ``x * inv`` multiply and the outlier-channel gather of ``_int8_linear`` are then already done."""

    def __init__(self, packed, inv, reduce_range: bool, outliers):
        self.packed, self.inv, self.reduce_range, self.outliers = packed, inv, reduce_range, outliers
        self.kept_idx = None if outliers is None else outliers[0].long().contiguous()

    def prescaled(self, xs, kept=None):
        """``linear(x)`` from ``xs`` = x * inv and ``kept`` = x at the outlier channels [rows, k]."""
        import torch

        y = torch.ops.quantized.linear_dynamic(xs, self.packed, self.reduce_range)
        if self.outliers is not None:
            y = y + kept @ self.outliers[1]
        return y


def onednn_wanted() -> bool:
    """``RESEARCH_AGENT_ONEDNN`` if set (1 or 0), else: on every CPU but Intel's (where MKL is fast)."""
    flag = os.environ.get("RESEARCH_AGENT_ONEDNN", "").strip()
    if flag in ("0", "1"):
        return flag == "1"
    return cpu_vendor() != "GenuineIntel"


def _onednn_ok(weight) -> bool:
    import torch

    return (onednn_wanted() and weight.dtype == torch.float32
            and weight.device.type == "cpu" and weight.numel() >= ONEDNN_MIN_ELEMENTS
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def _linear(weight, bias, x, *args, **kwargs):
    import torch.nn.functional as F

    return F.linear(x.to(weight.dtype), weight, bias)


def _onednn_linear(weight, bias, x, *args, **kwargs):
    import torch

    return torch.ops.mkldnn._linear_pointwise(x.to(weight.dtype), weight, bias, "none", [], "")


def _kernel(weight):
    return _onednn_linear if _onednn_ok(weight) else _linear


class DecodeLayers:
    """Holds merged LoRA weights between decodes; ``with layers.applied(model):`` decodes through them.

    ``quantize="int8"`` also decodes the large CPU matrices (the merged ones included) through int8
    copies of their weights: a quarter of the bytes per token, the float32 activations quantized per
    call after SmoothQuant's per-channel smoothing (``smooth_int8``).  The scales are calibrated by
    one forward pass over ``calibration`` (token ids; ``CALIBRATION_TEXT`` through the policy's
    tokenizer), again whenever the weights change, and a matrix whose int8 output there is off by
    more than ``INT8_MAX_ERROR`` keeps float32 (``int8_errors`` has each one's figure).  Inputs of
    more than ``INT8_MAX_ROWS`` rows (prompt prefills) keep the float32 weights.  The arithmetic
    changes, so this is for asking, serving and evaluating, never for the RL rollouts whose log-probs
    the update compares with its own float32 forward."""

    def __init__(self, max_bytes: int = 1 << 30, quantize: str = "none", calibration: list[int] | None = None):
        self.max_bytes = max_bytes  # the merged copies of adapted weights; above this, LoRA runs unmerged
        self.quantize = check_quantize(quantize)
        if self.quantize == "int8":
            if not int8_available():
                raise ValueError("--quantize int8: this torch build has no x86 int8 linear kernel "
                                 f"(quantized engines: {', '.join(_engines()) or 'none'})")
            if not calibration:
                raise ValueError("int8 decoding needs calibration token ids (CALIBRATION_TEXT, tokenized)")
        self.calibration = list(calibration or [])
        self.int8_errors: dict[str, float] = {}  # module name -> relative error on the calibration text
        self._key = None
        self._weights: list = []
        self._packed: dict = {}
        self._groups: list = []  # (member modules, packed, 1 / s, outliers, output widths): one int8 call each

    @contextmanager
    def applied(self, model):
        import torch

        if model.training or torch.is_grad_enabled():  # dropout and gradients need the real layers
            yield
            return
        lora = _vanilla_lora_layers(model)
        size = sum(m.base_layer.weight.numel() * m.base_layer.weight.element_size() for m, _ in lora)
        if size > self.max_bytes:
            lora = []
        key = (tuple(p._version for p in model.parameters()), tuple((id(m), active) for m, active in lora))
        stale = key != self._key
        if stale:
            self._weights = []
            for m, active in lora:
                w = m.base_layer.weight.detach().clone()
                for a in active:
                    w += m.get_delta_weight(a).to(w.dtype)
                self._weights.append(w)
            self._key = key
        swaps = [(m, w, m.base_layer.bias, partial(_kernel(w), w, m.base_layer.bias))
                 for (m, _), w in zip(lora, self._weights, strict=True)]
        inside = {id(m.base_layer) for m, _ in lora}
        forms: list = []  # (module, its Int8Form): set as module.int8_form while applied
        plain = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and id(m) not in inside]
        if self.quantize == "int8":
            swaps += [(m, m.weight, m.bias, partial(_kernel(m.weight), m.weight, m.bias)) for m in plain
                      if _int8_ok(m.weight)]
            reduce = _reduce_range()
            if stale:
                self._calibrate(model, [(m, w, b) for m, w, b, _ in swaps if _int8_ok(w)], reduce)
            quantized = []
            for m, w, b, exact in swaps:
                int8 = self._packed.get(id(m))
                if int8 is None:  # too small, not a CPU float32 weight, or too far off in int8
                    quantized.append((m, w, b, exact))
                else:
                    quantized.append((m, w, b, partial(_int8_linear, int8[0], int8[1], exact, reduce,
                                                       outliers=int8[2])))
                    forms.append((m, Int8Form(int8[0], int8[1], reduce, int8[2])))
            swaps = quantized
        else:
            swaps += [(m, m.weight, m.bias, partial(_onednn_linear, m.weight, m.bias)) for m in plain
                      if _onednn_ok(m.weight)]
        grouped = []
        if self.quantize == "int8":
            for members, packed, inv, outliers, widths in self._groups:
                exact = _Unfused(members)
                fn = partial(_int8_linear, packed, inv, exact, reduce, outliers=outliers)
                grouped.append((members[0], DecodeGroup(members, widths, fn, Int8Form(packed, inv, reduce, outliers))))
        try:
            for m, _, _, fn in swaps:
                m.forward = fn
            for m, group in grouped:
                m.decode_group = group
            for m, form in forms:
                m.int8_form = form
            yield
        finally:
            for m, _, _, _ in swaps:
                m.__dict__.pop("forward", None)
            for m, _ in grouped:
                m.__dict__.pop("decode_group", None)
            for m, _ in forms:
                m.__dict__.pop("int8_form", None)

    def _calibrate(self, model, targets: list, reduce_range: bool) -> None:
        """One forward over the calibration ids through the real layers; each target's hook turns its
        own input and output into its int8 form (or none) and lets go of them."""
        import torch

        names = {id(m): n for n, m in model.named_modules()}
        self._packed, self.int8_errors, self._groups = {}, {}, []
        shared: dict = {}  # id of an input tensor -> (that input, [(module, weight, bias, output)])

        def hook(weight, bias):
            def record(module, args, out):
                x = args[0]
                packed, inv, outliers, err = smooth_int8(weight, bias, x, out, reduce_range)
                self.int8_errors[names.get(id(module), "?")] = err
                if err <= INT8_MAX_ERROR:
                    self._packed[id(module)] = (packed, inv, outliers)
                    shared.setdefault(id(x), (x, []))[1].append((module, weight, bias, out))
            return record

        handles = [m.register_forward_hook(hook(w, b)) for m, w, b in targets]
        try:
            device = next(model.parameters()).device
            model(input_ids=torch.tensor([self.calibration], dtype=torch.long, device=device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        # matrices fed the same input (q/k/v, gate/up) also get one int8 form together: one call of
        # the kernel instead of two or three (each call costs ~30 us before it reads a byte here)
        for x, members in shared.values():
            if len(members) < 2:
                continue
            weight = torch.cat([w.detach().float() for _, w, _, _ in members])
            biases = [b for _, _, b, _ in members]
            bias = None
            if any(b is not None for b in biases):
                bias = torch.cat([b.detach().float() if b is not None else w.new_zeros(w.shape[0])
                                  for (_, w, _, _), b in zip(members, biases, strict=True)])
            out = torch.cat([o for _, _, _, o in members], dim=-1)
            packed, inv, outliers, err = smooth_int8(weight, bias, x, out, reduce_range)
            if err <= INT8_MAX_ERROR:
                widths = tuple(w.shape[0] for _, w, _, _ in members)
                self._groups.append((tuple(m for m, _, _, _ in members), packed, inv, outliers, widths))


class DecodeGroup:
    """Linear layers fed the same input, computed by one int8 call: ``group(x)`` is their outputs
    side by side (``widths`` each), in ``members`` order.  Set as ``members[0].decode_group`` while
    ``DecodeLayers.applied`` is active; ``decode_step`` uses it for q/k/v and gate/up."""

    def __init__(self, members: tuple, widths: tuple, fn, int8: Int8Form | None = None):
        self.members, self.widths, self._fn, self.int8 = members, widths, fn, int8

    def __call__(self, x):
        return self._fn(x)


class _Unfused:
    """A group's exact path (prefill-sized inputs): each member's own forward, side by side."""

    def __init__(self, members: tuple):
        self.members = members

    def __call__(self, x):
        import torch

        return torch.cat([m.forward(x) for m in self.members], dim=-1)


def _engines() -> list:
    import torch

    return list(torch.backends.quantized.supported_engines)
