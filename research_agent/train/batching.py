"""How an update's sequences are laid out for the forward/backward passes: shared prompts, little padding.

A GRPO step trains on G trajectories per prompt, and all G start with the same system prompt and
question, which for an agent is much of a trajectory.  Feeding that prompt G times (and
differentiating it G times) is waste, and so is padding every row of a batch to one long straggler
(sampled completions are mostly short).  On a CPU a pass costs a fixed amount (streaming the weights
through the cache: a one-token forward of the 135M model takes ~60 ms here) plus a part that grows
with the positions fed, so the layout trades the two:

- sequences with identical leading context (everything before the model's first token) share one
  prefix row; a block of up to ``micro_batch`` prefix rows runs in one left-padded pass;
- the block's suffixes are fed on top of those rows' keys and values, in chunks of up to
  ``micro_batch`` rows chosen by a small dynamic program over the suffix lengths (sorted, so chunks
  are contiguous) minimising ``passes × pass_cost + padded positions``.

The prefix pass's K/V reach the suffix passes as detached leaves: the suffixes' gradients add up in
them, and one backward pass per block carries the sum through the prefix, so memory stays bounded
by the prefix pass plus one chunk while the prefix is differentiated once.  The step's loss divides
by the step's total number of model tokens, so the layout changes the cost, not the update (a test
compares it with the plain padded layout).

A shared prefix stops one token before the first model token: the logit that predicts the first
model token then comes from the suffix pass, so the prefix pass needs no vocabulary projection.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from research_agent.inference.devices import model_device
from research_agent.inference.kv_cache import returned_cache
from research_agent.train.loss import pad_batch, token_logprobs

PASS_COST = 32  # a pass's fixed cost in positions (measured: forward of 1 vs 64 vs 256 tokens, smollm2)


@dataclass
class Block:
    """Prefix rows run in one pass (``prefixes``: token ids, possibly empty for plain rows) and the
    suffix chunks fed on top: ``chunks`` hold unit indices, ``row[unit]`` its prefix row."""

    prefixes: list[list[int]] = field(default_factory=list)
    row: dict[int, int] = field(default_factory=dict)
    chunks: list[list[int]] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        return not any(self.prefixes)


def _lead(mask: list[int]) -> int:
    """Index of the first model token (the length of the leading context)."""
    for i, m in enumerate(mask):
        if m:
            return i
    return len(mask)


def chunk_lengths(lengths: list[int], max_rows: int, pass_cost: float = PASS_COST) -> list[list[int]]:
    """Split indices into chunks of ≤ ``max_rows`` minimising Σ (pass_cost + rows × longest).

    Over lengths sorted longest first the best chunks are contiguous runs, so a dynamic program over
    the sorted order finds the optimum in O(n × max_rows).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j sorted items
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for size in range(1, min(max_rows, j) + 1):
            i = j - size  # chunk = sorted items i..j-1, padded to item i's length
            cost = best[i] + pass_cost + size * lengths[order[i]]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    chunks, j = [], n
    while j > 0:
        chunks.append(order[cut[j]: j])
        j = cut[j]
    return chunks[::-1]


def plan_update(units: list[tuple[list[int], list[int]]], micro_batch: int, *, share_prefix: bool = True,
                pass_cost: float = PASS_COST) -> list[Block]:
    """Lay out (ids, mask) units into blocks of shared prefixes and padding-light suffix chunks.

    ``share_prefix=False`` with a huge ``pass_cost`` (say 1e9) is the plain layout: whole sequences
    in the fewest micro-batches of ``micro_batch`` rows (the reference in ``bench/update_layout.py``).
    """
    micro_batch = max(1, micro_batch)
    rows: dict[tuple, list[int]] = {}
    plain: list[int] = []
    for i, (ids, mask) in enumerate(units):
        lead = _lead(mask)
        if share_prefix and lead >= 2:
            rows.setdefault(tuple(ids[: lead - 1]), []).append(i)
        else:
            plain.append(i)
    blocks: list[Block] = []
    keys = sorted(rows, key=len, reverse=True)  # similar prefix lengths pad less in one pass
    for b in range(0, len(keys), micro_batch):
        block = Block()
        for r, key in enumerate(keys[b: b + micro_batch]):
            block.prefixes.append(list(key))
            block.row.update({i: r for i in rows[key]})
        members = sorted(block.row)
        lengths = [len(units[i][0]) - len(block.prefixes[block.row[i]]) for i in members]
        block.chunks = [[members[k] for k in c] for c in chunk_lengths(lengths, micro_batch, pass_cost)]
        blocks.append(block)
    if plain:
        block = Block(prefixes=[[]], row={i: 0 for i in plain})
        lengths = [len(units[i][0]) for i in plain]
        block.chunks = [[plain[k] for k in c] for c in chunk_lengths(lengths, micro_batch, pass_cost)]
        blocks.append(block)
    return blocks


def plan_cost(plan: list[Block], units: list[tuple[list[int], list[int]]]) -> tuple[int, int]:
    """(passes, positions fed) of one gradient pass over ``plan``: padded rows × widths, prefixes included."""
    passes = positions = 0
    for block in plan:
        if not block.plain:
            passes += 1
            positions += len(block.prefixes) * max(len(p) for p in block.prefixes)
        for chunk in block.chunks:
            passes += 1
            positions += len(chunk) * max(len(units[i][0]) - len(block.prefixes[block.row[i]]) for i in chunk)
    return passes, positions


def reference_mode(model):
    """No grad and the LoRA adapter off: the KL reference is the same network without its adapter (E1)."""
    from contextlib import ExitStack

    stack = ExitStack()
    stack.enter_context(torch.no_grad())
    if hasattr(model, "disable_adapter"):
        stack.enter_context(model.disable_adapter())
    return stack


def prefix_pass(model, prefixes: list[list[int]], pad_id: int, *, reference: bool = False):
    """Left-padded pass over prefix rows; returns (per-layer (keys, values), attention mask).

    With grad unless ``reference`` (then the adapter is off: the KL reference's prefix)."""
    width = max(len(p) for p in prefixes)
    ids = torch.full((len(prefixes), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prefixes), width), dtype=torch.long)
    pos = torch.zeros((len(prefixes), width), dtype=torch.long)
    for r, p in enumerate(prefixes):
        ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[r, width - len(p):] = 1
        pos[r, width - len(p):] = torch.arange(len(p))
    dev = model_device(model)
    ids, attn, pos = ids.to(dev), attn.to(dev), pos.to(dev)
    with (reference_mode(model) if reference else nullcontext()):
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in returned_cache(out).layers], attn


def suffix_logprobs(model, seqs: list[list[int]], masks: list[list[int]], pad_id: int, *, kv=None,
                    prefix_attn: torch.Tensor | None = None, rows: list[int] | None = None,
                    prefix_lens: list[int] | None = None, with_entropy: bool = False):
    """Token log-probs of right-padded suffixes, each fed on top of prefix row ``rows[i]`` of a
    prefix pass (``kv``, ``prefix_attn``; none for plain rows); returns (logp, entropy, loss_mask),
    each [len(seqs), longest suffix]."""
    dev = model_device(model)
    ids, attn, lmask = pad_batch(seqs, masks, pad_id, device=dev)
    if kv is None:
        logp, ent = token_logprobs(model, ids, attn, with_entropy=with_entropy, loss_mask=lmask)
        return logp, ent, lmask
    from transformers import DynamicCache

    index = torch.tensor(rows, dtype=torch.long, device=dev)
    cache = DynamicCache(ddp_cache_data=[(k.index_select(0, index), v.index_select(0, index)) for k, v in kv])
    full_attn = torch.cat([prefix_attn.index_select(0, index), attn], dim=1)
    pos = (torch.tensor(prefix_lens, dtype=torch.long, device=dev)[:, None]
           + torch.arange(ids.shape[1], device=dev)[None, :])
    logp, ent = token_logprobs(model, ids, full_attn, with_entropy=with_entropy, loss_mask=lmask,
                               cache=cache, position_ids=pos)
    return logp, ent, lmask
