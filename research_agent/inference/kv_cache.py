"""The keyword under which transformers passes and returns a model's KV cache.

transformers 5.25 calls it ``cache`` (argument and output field); 5.17, the version on the first GPU
machine this project ran on, calls it ``past_key_values``.  The prefix cache, continuous batching and
the trainer's shared-prefix loss all hand a ``Cache`` to a forward and read the grown one back, and a
cache under the wrong name is not an error there: the unknown keyword is passed down to the layers
and dropped, so the forward silently runs without the prefix.  Every such call goes through here.
"""

from __future__ import annotations

from functools import cache as _once


@_once
def cache_name() -> str:
    """``cache`` or ``past_key_values``: what this transformers' causal-LM output calls the cache."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    fields = getattr(CausalLMOutputWithPast, "__dataclass_fields__", {})
    return "cache" if "cache" in fields else "past_key_values"


def cache_kwargs(cache) -> dict:
    """The forward's keyword argument that feeds ``cache`` (a transformers ``Cache``)."""
    return {cache_name(): cache}


def returned_cache(out):
    """The cache a forward called with ``use_cache=True`` returned."""
    return getattr(out, cache_name())
