"""Helpers the decode tests share."""

import torch

from research_agent.inference.kv_cache import cache_kwargs, returned_cache
from research_agent.inference.prefix_cache import growing


def prefill(model, rows: list[list[int]], pad: int):
    """A left-padded prefill into a growing cache, as ``prefix_cache`` makes them."""
    from transformers import DynamicCache

    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    cache = growing(DynamicCache(config=model.config))
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, **cache_kwargs(cache), use_cache=True)
    return returned_cache(out), attn, out.logits[:, -1].argmax(-1)
