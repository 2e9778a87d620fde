"""One decode step of a Llama-family model, without transformers' per-call machinery.

A decode step feeds one token per row.  Through ``model(...)`` that step also builds a causal mask,
walks transformers' keyword plumbing, attention-interface lookup and output classes in every one of
the model's layers, and computes RMSNorm as six separate ops: on a 2-core CPU, for smollm2-135m,
about a tenth of a token's time once the matrices are fast (int8), and the part no kernel removes.
``decode_step`` computes the same function directly from the model's own modules:

- every linear layer is called through its own ``forward``, so the swaps of
  ``fast_linear.DecodeLayers`` (merged LoRA, oneDNN, int8) and peft's LoRA layers all apply; where
  ``DecodeLayers`` made one int8 form of q/k/v (or gate/up) together, that is one call;
- RMSNorm is one fused op (``F.rms_norm``), the rotary embedding comes from the model's own
  rotary module (every RoPE scaling type it supports), attention is one
  ``scaled_dot_product_attention`` with grouped K/V heads, masked only where a row has padding;
- keys and values go into the same ``Cache`` through ``cache.update``, so the prefix cache, row
  removal and continuous batching see exactly what they see after ``model(...)``.

The arithmetic is the model's up to float rounding (a fused norm sums in another order); greedy
tokens are tested equal to ``model(...)``'s (``tests/agent/test_decode_step.py``).  Only the
architectures whose layers are known to have this shape are taken (``supported``); any other model,
a model in training mode, or ``RESEARCH_AGENT_FAST_DECODE=0`` goes through ``model(...)``.
"""

from __future__ import annotations

import os

ARCHITECTURES = ("llama", "qwen2")  # decoder layers: pre-norm attention (GQA, RoPE) + pre-norm SiLU MLP


def _causal_lm(model):
    """The transformers ``*ForCausalLM`` under a peft wrapper (or the model itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def enabled() -> bool:
    return os.environ.get("RESEARCH_AGENT_FAST_DECODE", "").strip() != "0"


def supported(model) -> bool:
    """Whether ``decode_step`` computes this model's step: a Llama or Qwen2 decoder on the CPU, full
    attention in every layer, SiLU MLPs."""
    return architecture_supported(model) and _causal_lm(model).model.embed_tokens.weight.device.type == "cpu"


def architecture_supported(model) -> bool:
    """Whether the model's layers have the shape a hand-written step computes (a Llama or Qwen2
    decoder, full attention in every layer, SiLU MLPs), on any device; ``static_decode`` takes these
    on a GPU too."""
    lm = _causal_lm(model)
    cfg = getattr(lm, "config", None)
    inner = getattr(lm, "model", None)
    if cfg is None or inner is None or getattr(cfg, "model_type", None) not in ARCHITECTURES:
        return False
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "hidden_act", "silu") != "silu":
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
        return False
    if getattr(getattr(inner, "embed_tokens", None), "weight", None) is None:
        return False
    return hasattr(inner, "rotary_emb") and hasattr(lm, "lm_head")


class _Plan:
    """The modules one step reads, gathered once per generation (attribute walks cost microseconds
    each, and a step makes hundreds of them); with the compiled kernels, also each norm's weight with
    the following int8 layer's input scale folded in."""

    def __init__(self, lm):
        cfg = lm.config
        inner = lm.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm = (inner.norm.weight, _eps(inner.norm))
        self.lm_head = lm.lm_head
        self.layers = []
        for layer in inner.layers[: cfg.num_hidden_layers]:
            at, mlp = layer.self_attn, layer.mlp
            self.layers.append((
                (layer.input_layernorm.weight, _eps(layer.input_layernorm)),
                at.q_proj, at.k_proj, at.v_proj, at.o_proj,
                (layer.post_attention_layernorm.weight, _eps(layer.post_attention_layernorm)),
                mlp.gate_proj, mlp.up_proj, mlp.down_proj, mlp.act_fn,
            ))
        import torch

        self.kernels = None
        if self.embed.weight.dtype == torch.float32 and all(n[0].dtype == torch.float32 for n in self._norms()):
            from . import decode_kernels

            lib = decode_kernels.library()
            if lib is not None:
                self.kernels = lib
                self.fused = [self._fuse(layer) for layer in self.layers]
                self.head_norm = _Norm(self.norm, self.lm_head.__dict__.get("int8_form"))

    def _norms(self):
        yield self.norm
        for layer in self.layers:
            yield layer[0]
            yield layer[5]

    @staticmethod
    def _fuse(layer):
        n1, q_proj, k_proj, v_proj, _, n2, gate, up, down, _ = layer
        qkv = _group(q_proj, (q_proj, k_proj, v_proj))
        gate_up = _group(gate, (gate, up))
        down_form = down.__dict__.get("int8_form")
        if down_form is not None and down_form.outliers is not None:
            down_form = None  # its outlier channels would need SiLU * up gathered: take its own forward
        return (qkv, _Norm(n1, qkv.int8 if qkv is not None else None),
                gate_up, _Norm(n2, gate_up.int8 if gate_up is not None else None), down_form)


class _Norm:
    """An RMSNorm's weight for the kernel: as it is, and, where an int8 layer reads its output, with
    that layer's input scale folded in and the unscaled weight of the layer's outlier channels."""

    def __init__(self, norm: tuple, form=None):
        self.weight, self.eps = norm[0].detach().contiguous(), norm[1]
        self.form = form
        if form is not None:
            self.folded = (self.weight * form.inv).contiguous()
            self.kept_idx = form.kept_idx
            self.kept_weight = None if form.kept_idx is None else self.weight.index_select(0, form.kept_idx)


def _eps(norm) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    return float(eps if eps is not None else getattr(norm, "eps", 1e-6))


def plan(model) -> _Plan:
    """The modules of ``model``'s decode step, for the steps of one generation.  Not kept longer: a
    peft adapter added or unloaded later replaces the layers a kept plan would still call."""
    return _Plan(_causal_lm(model))


def _group(first, members: tuple):
    """The ``fast_linear.DecodeGroup`` computing exactly ``members`` in one call, if one is set."""
    group = first.__dict__.get("decode_group")
    if group is None or len(group.members) != len(members):
        return None
    return group if all(a is b for a, b in zip(group.members, members, strict=True)) else None


def decode_step(model, input_ids, attention_mask, position_ids, cache, steps: _Plan | None = None):
    """Logits [rows, vocab] for one new token per row (``input_ids`` [rows, 1]), its keys and values
    appended to ``cache``.  ``attention_mask`` [rows, cached + 1] marks each row's real positions
    (left padding is 0); ``position_ids`` [rows, 1] are the tokens' RoPE positions; ``steps`` is
    ``plan(model)``, made once for a generation's steps (made here when not given)."""
    p = steps if steps is not None else plan(model)
    if p.kernels is not None:
        return _kernel_step(p, input_ids, attention_mask, position_ids, cache)
    return _torch_step(p, input_ids, attention_mask, position_ids, cache)


def _attention_mask(attention_mask):
    """None when no row has padding (SDPA's fastest path), else [rows, 1, 1, keys] booleans."""
    return None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]


def _torch_step(p: _Plan, input_ids, attention_mask, position_ids, cache):
    import torch
    import torch.nn.functional as F

    rows = input_ids.shape[0]
    heads, kv_heads, hd = p.heads, p.kv_heads, p.head_dim
    half = hd // 2
    x = p.embed.forward(input_ids)  # [rows, 1, hidden]
    width = (x.shape[-1],)
    cos, sin = p.rotary.forward(x, position_ids)
    cos, sin = cos[:, None], sin[:, None]  # [rows, 1, 1, head_dim]: broadcast over heads
    mask = _attention_mask(attention_mask)
    gqa = kv_heads != heads

    def rope(t):
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

    for i, (n1, q_proj, k_proj, v_proj, o_proj, n2, gate, up, down, act) in enumerate(p.layers):
        h = F.rms_norm(x, width, n1[0], n1[1])
        qkv = _group(q_proj, (q_proj, k_proj, v_proj))
        if qkv is not None:  # one int8 call for the three; one rotary pass over q and k together
            heads_qkv = qkv(h).view(rows, 1, heads + 2 * kv_heads, hd).transpose(1, 2)
            qk = rope(heads_qkv[:, : heads + kv_heads])
            q, k, v = qk[:, :heads], qk[:, heads:], heads_qkv[:, heads + kv_heads:]
        else:
            q = rope(q_proj.forward(h).view(rows, 1, heads, hd).transpose(1, 2))
            k = rope(k_proj.forward(h).view(rows, 1, kv_heads, hd).transpose(1, 2))
            v = v_proj.forward(h).view(rows, 1, kv_heads, hd).transpose(1, 2)
        keys, values = cache.update(k, v, i)
        if mask is not None and mask.shape[-1] != keys.shape[-2]:
            raise ValueError(f"attention mask covers {mask.shape[-1]} positions, the cache {keys.shape[-2]}")
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)
        x = x + o_proj.forward(a.transpose(1, 2).reshape(rows, 1, heads * hd))
        h = F.rms_norm(x, width, n2[0], n2[1])
        gate_up = _group(gate, (gate, up))
        if gate_up is not None:
            g, u = gate_up(h).split(gate_up.widths, dim=-1)
        else:
            g, u = gate.forward(h), up.forward(h)
        x = x + down.forward(act(g) * u)
    x = F.rms_norm(x, width, p.norm[0], p.norm[1])
    return p.lm_head.forward(x)[:, -1, :]


def _kernel_step(p: _Plan, input_ids, attention_mask, position_ids, cache):
    """``_torch_step`` through ``decode_kernels``: one call per norm (with the residual add before
    it and the int8 input scale in its weight), per rotary pass and per SiLU * up.  The activations
    are [rows, hidden] matrices throughout; the matrices are called as in ``_torch_step``."""
    import torch
    import torch.nn.functional as F

    from . import decode_kernels as K
    from .fast_linear import INT8_MAX_ROWS

    lib = p.kernels
    rows = input_ids.shape[0]
    heads, kv_heads, hd = p.heads, p.kv_heads, p.head_dim
    x3 = p.embed.forward(input_ids)  # [rows, 1, hidden]: a new tensor, updated in place below
    cos, sin = p.rotary.forward(x3, position_ids)
    cos, sin = cos.reshape(rows, hd).contiguous(), sin.reshape(rows, hd).contiguous()
    x = x3.reshape(rows, -1).contiguous()
    h = torch.empty_like(x)
    int8 = rows <= INT8_MAX_ROWS  # above, the int8 layers run their float32 weights (prefill sizes)
    mask = _attention_mask(attention_mask)
    gqa = kv_heads != heads
    rotated = heads + kv_heads

    def norm(n: _Norm, delta):
        """h = RMSNorm(x += delta); and, for an int8 reader, x's outlier channels [rows, k] unscaled."""
        if int8 and n.form is not None:
            kept = None if n.kept_idx is None else x.new_empty(rows, n.kept_idx.numel())
            K.add_rms_norm(lib, x, delta, n.folded, n.eps, h, n.kept_idx, n.kept_weight, kept)
            return n.form, kept
        K.add_rms_norm(lib, x, delta, n.weight, n.eps, h)
        return None, None

    delta = None
    for i, (layer, (qkv, n1, gate_up, n2, down_form)) in enumerate(zip(p.layers, p.fused, strict=True)):
        _, q_proj, k_proj, v_proj, o_proj, _, gate, up, down, _ = layer
        form, kept = norm(n1, delta)
        if qkv is not None:  # q, k and v side by side; one rotary pass over q and k
            y = form.prescaled(h, kept) if form is not None else qkv(h)
            K.rope(lib, y, rotated, hd, cos, sin)
            heads_qkv = y.view(rows, 1, heads + 2 * kv_heads, hd).transpose(1, 2)
            q, k, v = heads_qkv[:, :heads], heads_qkv[:, heads:rotated], heads_qkv[:, rotated:]
        else:
            q, k = q_proj.forward(h).contiguous(), k_proj.forward(h).contiguous()
            K.rope(lib, q, heads, hd, cos, sin)
            K.rope(lib, k, kv_heads, hd, cos, sin)
            q = q.view(rows, 1, heads, hd).transpose(1, 2)
            k = k.view(rows, 1, kv_heads, hd).transpose(1, 2)
            v = v_proj.forward(h).view(rows, 1, kv_heads, hd).transpose(1, 2)
        keys, values = cache.update(k, v, i)
        if mask is not None and mask.shape[-1] != keys.shape[-2]:
            raise ValueError(f"attention mask covers {mask.shape[-1]} positions, the cache {keys.shape[-2]}")
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)
        delta = o_proj.forward(a.transpose(1, 2).reshape(rows, heads * hd)).contiguous()
        form, kept = norm(n2, delta)
        if gate_up is not None:
            y = form.prescaled(h, kept) if form is not None else gate_up(h)
            width = gate_up.widths[0]
            g, u = y[:, :width], y[:, width:]
        else:
            g, u = gate.forward(h).contiguous(), up.forward(h).contiguous()
        m = x.new_empty(rows, g.shape[-1])
        if int8 and down_form is not None:
            K.silu_mul(lib, g, u, down_form.inv, m)
            delta = down_form.prescaled(m)
        else:
            K.silu_mul(lib, g, u, None, m)
            delta = down.forward(m).contiguous()
    form, kept = norm(p.head_norm, delta)
    return (form.prescaled(h, kept) if form is not None else p.lm_head.forward(h)).reshape(rows, -1)
