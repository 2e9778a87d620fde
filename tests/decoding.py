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


def next_step_logits(model, rows: list[list[int]], pad: int) -> torch.Tensor:
    """The logits [rows, vocab] of one decode step through ``model(...)`` after ``prefill``: the step
    int8 decoding changes (a prefill's many rows keep the float32 weights)."""
    cache, attn, nxt = prefill(model, rows, pad)
    attn = torch.cat([attn, torch.ones((len(rows), 1), dtype=attn.dtype)], dim=1)
    return model(input_ids=nxt[:, None], attention_mask=attn, position_ids=attn.sum(-1, keepdim=True) - 1,
                 **cache_kwargs(cache), use_cache=True).logits[:, -1]


# Tolerances derived from the number formats, not measured on one machine.  Two CPUs (or two code
# paths on one) differ in the order they add a sum's terms (SIMD width, BLAS blocking, a fused
# kernel) and in their int8 kernels (AVX2's 7-bit inputs, VNNI, AMX); what stays the same on every
# x86 CPU is IEEE float32's rounding of each operation and the 8-bit grid int8 rounds to.


def unit_roundoff(dtype: torch.dtype = torch.float32) -> float:
    """u, the most one rounding to ``dtype`` moves a value, relative to it: half the dtype's
    epsilon (2**-24 for float32, 2**-8 for bfloat16)."""
    return torch.finfo(dtype).eps / 2


def sum_rtol(n: int, dtype: torch.dtype = torch.float32) -> float:
    """Relative bound on the rounding error of a sum of ``n`` terms of one sign, added in any order:
    gamma_(n-1) = (n-1)u / (1 - (n-1)u) (Higham, Accuracy and Stability of Numerical Algorithms,
    2nd ed., section 4.2).  A sum computed in another order, or exactly, lands within it."""
    nu = (n - 1) * unit_roundoff(dtype)
    return nu / (1 - nu)


def int8_error(weight: torch.Tensor, x: torch.Tensor, input_bits: int) -> float:
    """The L2 norm of the error that rounding alone gives ``x @ weight.T`` in the int8 kernel used here
    (``torch.ops.quantized.linear_dynamic``), whatever the CPU: each input row is rounded to a grid of
    2**input_bits - 1 steps over its range (7 bits on AVX2 without VNNI, 8 with VNNI or AMX), each
    weight row to steps of max|w| / 127, and the int32 sums are exact.  A rounding error is uniform
    over its step (variance step**2 / 12) and independent of the others, so output j of a row has error
    variance (dx**2 |w_j|**2 + dw_j**2 |x|**2) / 12; summed over rows and outputs, a sum of thousands
    of independent terms, the actual error lands close to it (1.2x measured) on any CPU, while a wrong
    scale, a lost channel or a stale weight is many times further off."""
    x = x.reshape(-1, x.shape[-1]).double()
    w = weight.double()
    dx = (x.amax(-1).clamp(min=0) - x.amin(-1).clamp(max=0)) / (2**input_bits - 1)
    dw = w.abs().amax(-1) / 127
    var = dx[:, None] ** 2 * (w**2).sum(-1) + dw**2 * (x**2).sum(-1)[:, None]
    return float((var.sum() / 12).sqrt())


# Sixteen prompts (prose, lists, code, the agent's format): int8's row limit, so one decode step of
# them all runs the int8 kernels (``fast_linear.INT8_MAX_ROWS``)
PROMPTS = ["The capital of France is", "2 + 2 =", "Name three rivers of Africa: the Nile,", "def add(a, b):",
           "The largest ocean on Earth is the", "Water boils at a temperature of", "<search>countries bordering Peru",
           "Question: Who wrote Hamlet?\nAnswer:", "import numpy as", "The Moon orbits the", "Monday, Tuesday,",
           "One, two, three,", "The chemical symbol for gold is", "In 1969 two astronauts walked on the",
           'print("Hello,', "Paris is a city in"]

# What int8 decoding owes the user, on any CPU: float32's greedy token on most prompts and, where it
# takes another, one float32 itself finds nearly as likely (a near tie broken the other way: at least
# e**-2, a seventh, of the best token's probability).  Its error through 30 layers has no closed form,
# so these are the user's terms, not a fit to one machine: on this 7-bit AVX2 EPYC, and with 8-bit
# inputs or the oneDNN engine in their place, 75 to 100 % of the prompts kept (a random adapter this
# large is far from a trained model), chosen tokens at most 0.8 below the best; with the input scales
# left out, 0 to 17 % kept and gaps of 4 to 30.
INT8_KEPT = 1 / 2
INT8_GAP = 2.0


def greedy_kept(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """How next tokens chosen from ``got`` [rows, vocab] (int8) fare under float32's logits ``want``:
    the share of rows where they are float32's greedy token, and the most float32 scores one below its
    own best (in nats: a difference of logits is one of log-probabilities)."""
    choice = got.argmax(-1, keepdim=True)
    kept = (choice[:, 0] == want.argmax(-1)).float().mean().item()
    gap = (want.max(-1).values - want.gather(-1, choice)[:, 0]).max().item()
    return kept, gap
