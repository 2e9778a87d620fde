"""Token log-probs, the masked policy-gradient loss, KL to the reference, and the SFT loss.

Only the model's own tokens count (Search-R1's retrieved-token masking): observation tokens are
in the input, so the model conditions on them, but they carry no loss, no KL and no entropy.
The reference policy is the same network with the LoRA adapter disabled (E1), so no second copy
of the model is held in memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from research_agent.inference.kv_cache import cache_kwargs


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_id: int,
              device: torch.device | str | None = None) -> tuple[torch.Tensor, ...]:
    """Right-pad sequences; returns (input_ids, attention_mask, loss_mask) as tensors on ``device``
    (filled on the CPU, then moved once: row by row writes to a GPU tensor are one copy each)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    lmask = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        attn[i, : len(s)] = 1
        lmask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    if device is not None:
        ids, attn, lmask = ids.to(device), attn.to(device), lmask.to(device)
    return ids, attn, lmask


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   with_entropy: bool = False, loss_mask: torch.Tensor | None = None, *, cache=None,
                   position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each token given its prefix; position t holds log p(x_t | x_<t) (0 at t=0).

    With ``loss_mask`` the vocabulary projection and softmax run only where some row of the batch
    has a model token (``logits_to_keep``); elsewhere the result is 0.  In agent trajectories most
    tokens are prompt and observations, and on a CPU the 49k-wide projection and its fp32 softmax
    over every position are a large share of a training step, so this is the trainer's path.

    ``cache`` holds the K/V of a prefix that ``input_ids`` continue (``attention_mask`` then spans
    prefix and input, ``position_ids`` start after the prefix); position 0 of the result is the
    first input token, whose log-prob would need the prefix's last logit and is left 0.
    """
    keep = None
    if loss_mask is not None:
        cols = torch.nonzero(loss_mask[:, 1:].sum(0) > 0).squeeze(-1)
        keep = cols  # logits at column c predict token c + 1
    extra = {}
    if cache is not None:
        extra.update(cache_kwargs(cache), use_cache=True, position_ids=position_ids)
    split = _body_and_head(model)
    if split is None:  # not a decoder + output embedding we know how to split: the whole model's logits
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    **({"logits_to_keep": keep} if keep is not None else {}), **extra)
        hidden, head = None, None
        logits = out.logits if keep is not None else out.logits[:, :-1]
    else:
        body, head = split
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        hidden = hidden[:, :-1] if keep is None else hidden[:, keep]
    targets = input_ids[:, 1:] if keep is None else input_ids[:, keep + 1]
    if hidden is None:
        lp, ent = _logprobs_of_logits(logits, targets, with_entropy)
    else:
        lp, ent = head_logprobs(head, hidden, targets, with_entropy)
    if keep is None:
        lp = F.pad(lp, (1, 0), value=0.0)
        ent = F.pad(ent, (1, 0), value=0.0) if ent is not None else None
    else:
        lp = _scatter_columns(lp, keep + 1, input_ids.shape[1])
        ent = _scatter_columns(ent, keep + 1, input_ids.shape[1]) if ent is not None else None
    return lp, ent


# Most vocabulary logits held at once (fp32 elements): 32 M is 128 MB. A micro-batch of 4 SFT
# demonstrations of ~850 tokens over smollm2's 49k vocabulary is 167 M (670 MB, and as much again for
# the log-softmax and for each gradient); over qwen's 152k, 2 GB each.
LOGIT_CHUNK_ELEMENTS = 32 * 2**20


def _body_and_head(model):
    """(decoder stack returning normed hidden states, output projection), or None if unknown."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        body, head = base.get_decoder(), base.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if body is None or body is base or not isinstance(head, torch.nn.Linear):
        return None
    return body, head


def _logprobs_of_logits(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    lp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = -(logp_all.exp() * logp_all).sum(-1)
    return lp, ent


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias, with_entropy: bool):
    lp, ent = _logprobs_of_logits(F.linear(hidden, weight, bias), targets, with_entropy)
    return (lp, ent) if with_entropy else (lp,)


def head_logprobs(head: torch.nn.Linear, hidden: torch.Tensor, targets: torch.Tensor,
                  with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of ``targets`` under ``head(hidden)``, never holding more than ``LOGIT_CHUNK_ELEMENTS``
    logits: above that, column chunks whose logits are recomputed in the backward instead of kept
    (``torch.utils.checkpoint``), so the full [batch, columns, vocab] tensor, its log-softmax and their
    gradients never exist. The same arithmetic per column, so the values equal the unchunked ones."""
    rows, cols = targets.shape
    vocab = head.weight.shape[0]
    per_col = max(rows * vocab, 1)
    if rows * cols * vocab <= LOGIT_CHUNK_ELEMENTS or cols <= 1:
        return _logprobs_of_logits(head(hidden), targets, with_entropy)
    step = max(1, LOGIT_CHUNK_ELEMENTS // per_col)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or head.weight.requires_grad)
    lps, ents = [], []
    for start in range(0, cols, step):
        args = (hidden[:, start:start + step], targets[:, start:start + step], head.weight, head.bias, with_entropy)
        if grad:
            from torch.utils.checkpoint import checkpoint

            out = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            out = _chunk_logprobs(*args)
        lps.append(out[0])
        if with_entropy:
            ents.append(out[1])
    return torch.cat(lps, dim=1), (torch.cat(ents, dim=1) if with_entropy else None)


def _scatter_columns(values: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
    """Place per-kept-column values into a zero [batch, width] tensor (differentiable)."""
    full = values.new_zeros((values.shape[0], width))
    return full.index_copy(1, cols, values)


def policy_gradient_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor,
                         advantages: torch.Tensor, mask: torch.Tensor, *, kl_coef: float = 0.05,
                         clip_ratio: float | None = None, denom: float | None = None
                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level surrogate loss averaged over model tokens.

    ratio = exp(logp − old_logp) (1 on-policy); with ``clip_ratio`` the PPO clipped objective.
    KL uses the k3 estimator exp(ref − logp) − (ref − logp) − 1, which is ≥ 0.  ``denom`` is the
    number of model tokens the average runs over (default: this batch's); a micro-batch of a larger
    step passes the step's total, so its losses sum to the step's token mean.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # per sequence or per token
    ratio = torch.exp(logp - old_logp)
    surrogate = ratio * adv
    if clip_ratio is not None:
        clipped = torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio) * adv
        surrogate = torch.minimum(surrogate, clipped)
    delta = ref_logp - logp
    kl = torch.exp(delta) - delta - 1
    per_token = -surrogate + kl_coef * kl
    denom = mask.sum().clamp(min=1.0) if denom is None else torch.tensor(max(float(denom), 1.0), device=mask.device)
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        stats = {"kl": float((kl * mask).sum() / denom), "ratio": float((ratio * mask).sum() / denom)}
    return loss, stats


def sft_loss(model, input_ids, attention_mask, loss_mask, denominator: float | None = None) -> torch.Tensor:
    """Cross-entropy on the model's own tokens only (observations masked), averaged over those
    tokens, or summed and divided by ``denominator`` (a step's token count when its rows run in
    several passes: the passes' losses then add up to the step's mean)."""
    lp, _ = token_logprobs(model, input_ids, attention_mask, loss_mask=loss_mask)
    m = loss_mask.clone()
    m[:, 0] = 0.0
    denom = m.sum().clamp(min=1.0) if denominator is None else max(float(denominator), 1.0)
    return -(lp * m).sum() / denom
