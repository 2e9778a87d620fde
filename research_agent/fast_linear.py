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

Results equal the plain layers up to float rounding (a different summation order).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache, partial

ONEDNN_MIN_ELEMENTS = 1 << 19


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


@lru_cache(maxsize=1)
def cpu_vendor() -> str:
    """``vendor_id`` of ``/proc/cpuinfo`` (e.g. GenuineIntel, AuthenticAMD); empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


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
    """Holds merged LoRA weights between decodes; ``with layers.applied(model):`` decodes through them."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes  # the merged copies of adapted weights; above this, LoRA runs unmerged
        self._key = None
        self._weights: list = []

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
        if key != self._key:
            self._weights = []
            for m, active in lora:
                w = m.base_layer.weight.detach().clone()
                for a in active:
                    w += m.get_delta_weight(a).to(w.dtype)
                self._weights.append(w)
            self._key = key
        swaps = [(m, partial(_kernel(w), w, m.base_layer.bias)) for (m, _), w in zip(lora, self._weights, strict=True)]
        inside = {id(m.base_layer) for m, _ in lora}
        swaps += [(m, partial(_onednn_linear, m.weight, m.bias)) for m in model.modules()
                  if isinstance(m, torch.nn.Linear) and id(m) not in inside and _onednn_ok(m.weight)]
        try:
            for m, fn in swaps:
                m.forward = fn
            yield
        finally:
            for m, _ in swaps:
                m.__dict__.pop("forward", None)
