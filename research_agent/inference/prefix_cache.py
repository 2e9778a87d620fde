"""Prefix KV caching for multi-turn rollouts: each turn only prefills what is new.

An agent turn's prompt is the previous turn's prompt, the tokens the model just wrote and the
tool's observation.  Re-running the whole transcript through the model every turn (what plain
``model.generate`` does) makes prefill the dominant cost of a rollout on a CPU.  ``PrefixCache``
keeps the key/value tensors of finished generations keyed by their token ids;
``cached_generate`` finds, for every prompt of a batch, the longest cached prefix (of the same
trajectory's last turn, or of any trajectory sharing the system prompt), and feeds only the rest.

Layout of one batched forward (pads only ever at the left, as in ordinary left-padded
generation, so the model's own mask handling applies unchanged)::

    row i:  [zeros U-u_i | cached K/V of p_i[:u_i]] [pads N-n_i | p_i[u_i:]]   then one column per new token
             '----- cache, width U --------------'   '------ input block, width N ------'

where N is the longest uncached suffix in the batch and u_i = max(0, len(p_i) - N): a row whose
cached prefix is longer than that re-feeds a few cached tokens instead of padding in the middle.
Finished rows leave the batch (their K/V is stored first), so short answers stop costing compute.

The cache is only valid for the weights that computed it: it is dropped whenever any parameter's
version counter moves (an optimizer step updates LoRA weights in place), so a trainer never
decodes with stale keys.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .devices import model_device
from .kv_cache import cache_kwargs, returned_cache


@dataclass
class _Entry:
    ids: np.ndarray  # int64 token ids whose K/V are stored
    layers: list  # per layer: (keys, values), each [heads, len(ids), head_dim]
    nbytes: int


class PrefixCache:
    """An LRU store of per-sequence K/V tensors, bounded in bytes."""

    def __init__(self, max_bytes: int = 1 << 30, min_prefix: int = 16):
        self.max_bytes = max_bytes
        self.min_prefix = min_prefix  # shorter matches are not worth a cache copy
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self.nbytes = 0
        self.fingerprint: tuple | None = None
        self.hit_tokens = 0  # prompt tokens served from the cache (for benchmarks and tests)
        self.fed_tokens = 0  # prompt tokens run through the model

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def check_weights(self, fingerprint: tuple) -> None:
        """Drop everything if the weights changed since the entries were computed."""
        if fingerprint != self.fingerprint:
            self.clear()
            self.fingerprint = fingerprint

    def lookup(self, ids: list[int]) -> tuple[int, _Entry | None]:
        """The longest stored prefix of ``ids`` (at most ``len(ids) - 1``: one token must be fed)."""
        query = np.asarray(ids, dtype=np.int64)
        best, best_key = 0, None
        for key, entry in self._entries.items():
            n = min(len(entry.ids), len(query) - 1)
            if n <= best:
                continue
            diff = np.flatnonzero(entry.ids[:n] != query[:n])
            common = int(diff[0]) if len(diff) else n
            if common > best:
                best, best_key = common, key
        if best_key is None or best < self.min_prefix:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key]

    def put(self, ids: list[int], layers: list) -> None:
        arr = np.asarray(ids, dtype=np.int64)
        nbytes = sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        # an entry this one extends is superseded (a trajectory's previous turn)
        for key in [k for k, e in self._entries.items()
                    if len(e.ids) <= len(arr) and np.array_equal(e.ids, arr[: len(e.ids)])]:
            self.nbytes -= self._entries.pop(key).nbytes
        self._entries[self._next] = _Entry(arr, layers, nbytes)
        self._next += 1
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes and self._entries:
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.nbytes


def _append(cur, buf, new):
    """``cur`` (a view of ``buf``'s leading positions, or anything else) extended by ``new`` along the
    sequence axis; returns (the extended view, its buffer), reallocating with spare room when needed."""
    n = cur.shape[-2] if cur.dim() == 4 else 0
    total = n + new.shape[-2]
    if (buf is None or n == 0 or cur.data_ptr() != buf.data_ptr() or buf.shape[:2] != new.shape[:2]
            or buf.shape[-2] < total):  # a fresh or replaced cache (rows left the batch), or full
        fresh = new.new_empty((*new.shape[:2], max(total * 5 // 4, total + 64), new.shape[-1]))
        if n:
            fresh[:, :, :n] = cur
        buf = fresh
    buf[:, :, n:total] = new
    return buf[:, :, :total], buf


def _growing_layer_class():
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` that writes each step's keys/values into spare room instead of
        concatenating: ``torch.cat`` copies the whole cache every decode step (11-14 % of a smollm2
        decode step here); this copies it only when the room runs out, then leaves 25 % more room
        (a 2,000-token prompt has space for a 500-token turn)."""

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys, self._kbuf = _append(self.keys, getattr(self, "_kbuf", None), key_states)
            self.values, self._vbuf = _append(self.values, getattr(self, "_vbuf", None), value_states)
            return self.keys, self.values

    return GrowingLayer


_GROWING = None


def growing(cache):
    """Switch ``cache``'s layers to ``GrowingLayer`` (same data, appends without a full copy)."""
    from transformers.cache_utils import DynamicLayer

    global _GROWING
    if _GROWING is None:
        _GROWING = _growing_layer_class()
    for layer in cache.layers:
        if type(layer) is DynamicLayer:  # not a sliding-window or other special layer
            layer.__class__ = _GROWING
    return cache


def weights_fingerprint(model) -> tuple:
    """Version counters of every parameter: any in-place update (an optimizer step) changes it."""
    return tuple(p._version for p in model.parameters())


def _common_prefix(prompts: list[list[int]]) -> int:
    n = min(len(p) for p in prompts)
    for i in range(n):
        t = prompts[0][i]
        if any(p[i] != t for p in prompts[1:]):
            return i
    return n


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a bijection of 64-bit integers whose outputs look independent."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def seeded_uniform(seed: int, position: int) -> float:
    """A uniform number in [0, 1) that depends on ``(seed, position)`` alone.

    A seeded row draws its token at sequence position ``position`` from this number instead of the
    global generator, so what it samples does not depend on which other rows share its batch, on
    how the server chunks it or on the turns of other episodes drawn before it: the same seed gives
    the same tokens (up to ties the floating point of another device may break differently).
    """
    return (_mix64(_mix64(seed & _M64) ^ (position & _M64)) >> 11) / float(1 << 53)


def sample(probs, fixed: list[tuple[int, float]] | None = None):
    """One token per row, drawn from ``probs`` [rows, vocab] by inverting the cumulative distribution.

    The same distribution as ``torch.multinomial(probs, 1)`` with one uniform draw per row instead
    of one exponential draw per vocabulary entry: on this CPU 0.6 ms against 10 ms for 8 × 49k,
    which was a seventh of a smollm2 decode step.  ``right=True`` never lands on a zero-probability
    entry (its cumulative value equals its predecessor's).  ``fixed`` gives some rows their uniform
    number (``seeded_uniform``) instead of the global generator's.
    """
    import torch

    cdf = probs.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), dtype=cdf.dtype, device=cdf.device)
    if fixed:
        rows = torch.tensor([b for b, _ in fixed], dtype=torch.long, device=cdf.device)
        u[rows, 0] = torch.tensor([x for _, x in fixed], dtype=cdf.dtype, device=cdf.device)
    u = u * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def cached_generate(model, prompts: list[list[int]], store: PrefixCache, *, max_new_tokens: int,
                    temperature: float, eos_ids: set[int], pad_id: int, stop_hit=None, admit=None, on_done=None,
                    seeds=None):
    """Generate for a batch of prompts, reusing and refilling ``store``.

    Returns, per prompt, (generated ids, log-probs of those ids under the untempered policy, number
    of generated ids whose K/V were computed).  ``stop_hit(ids) -> bool`` ends a row early (a stop
    string); EOS ends it too.  Generated ids run up to and including the finishing token.

    Continuous batching: ``admit(active_rows) -> list of prompts`` is asked before every decode step
    for prompts to start now (they are prefilled and join the running batch: a row that finished
    need not wait for the longest one), and ``on_done(index, ids, logprobs, fed)`` hears of each row
    as soon as it finishes.  Rows are indexed in arrival order (``prompts`` first, then admitted
    ones); the return value covers them all.

    ``seeds`` (a list by row index, or a function of it; None for a row drawn from the global
    generator) makes a sampled row's tokens a function of its seed (``seeded_uniform``).
    """
    import torch

    from .decode_step import decode_step, enabled, plan, supported

    store.check_weights(weights_fingerprint(model))
    dev = model_device(model)
    lean = enabled() and not model.training and supported(model)  # one decode step without model(...)
    steps = plan(model) if lean else None
    # a prefix shared by the whole batch (the system prompt) is computed once, then reused
    if len(prompts) > 1:
        shared = _common_prefix(prompts)
        if shared >= 2 * store.min_prefix and all(store.lookup(p)[0] < shared for p in prompts):
            _prefill_only(model, prompts[0][:shared], store, pad_id)

    prompts = [list(p) for p in prompts]
    if seeds is None:
        seed_of = None
    else:
        seed_of = seeds if callable(seeds) else (lambda i, _s=list(seeds): _s[i] if i < len(_s) else None)
    row_seed = [seed_of(i) if seed_of else None for i in range(len(prompts))]
    cache, attn, logits, starts = _prefill(model, prompts, store, pad_id)
    gen: list[list[int]] = [[] for _ in prompts]
    lps: list[list[float]] = [[] for _ in prompts]
    fed_new = [0] * len(prompts)
    active = list(range(len(prompts)))  # index of each current batch row
    while True:
        logp = torch.log_softmax(logits.float(), dim=-1)
        if temperature > 0:
            fixed = [(b, seeded_uniform(row_seed[r], len(prompts[r]) + len(gen[r])))
                     for b, r in enumerate(active) if row_seed[r] is not None]
            chosen = sample(torch.softmax(logits.float() / temperature, dim=-1), fixed)
        else:
            chosen = logp.argmax(dim=-1)
        chosen_lp = logp.gather(-1, chosen[:, None]).squeeze(-1).tolist()
        chosen = chosen.tolist()
        keep = []
        for b, row in enumerate(active):
            tok = chosen[b]
            gen[row].append(tok)
            lps[row].append(chosen_lp[b])
            done = (tok in eos_ids or len(gen[row]) >= max_new_tokens
                    or (stop_hit is not None and stop_hit(gen[row])))
            if done:
                _store_row(store, cache, b, starts[row], prompts[row] + gen[row][: fed_new[row]])
                if on_done is not None:
                    on_done(row, gen[row], lps[row], fed_new[row])
            else:
                keep.append(b)
        if len(keep) < len(active):
            index = torch.tensor(keep, dtype=torch.long, device=dev)
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, index)
                layer.values = layer.values.index_select(0, index)
            attn = attn.index_select(0, index)
            active = [active[b] for b in keep]
        new = [list(p) for p in admit(len(active))] if admit is not None else []
        if not active and not new:
            break
        if active:
            step_ids = torch.tensor([[chosen[b]] for b in keep], dtype=torch.long, device=dev)
            step_pos = torch.tensor([[len(prompts[r]) + fed_new[r]] for r in active], dtype=torch.long, device=dev)
            attn = torch.cat([attn, torch.ones((len(active), 1), dtype=torch.long, device=dev)], dim=1)
            if lean:
                logits = decode_step(model, step_ids, attn, step_pos, cache, steps)
            else:
                out = model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos,
                            **cache_kwargs(cache), use_cache=True, logits_to_keep=1)
                cache = returned_cache(out)
                logits = out.logits[:, -1, :]
            for r in active:
                fed_new[r] += 1
        if new:
            first = len(prompts)
            prompts += new
            gen += [[] for _ in new]
            lps += [[] for _ in new]
            fed_new += [0] * len(new)
            row_seed += [seed_of(i) if seed_of else None for i in range(first, len(prompts))]
            new_cache, new_attn, new_logits, new_starts = _prefill(model, new, store, pad_id)
            if active:
                cache, attn, shift = _join(cache, attn, new_cache, new_attn)
                starts += [s + shift[1] for s in new_starts]
                for r in active:
                    starts[r] += shift[0]
                logits = torch.cat([logits, new_logits], dim=0)
            else:
                cache, attn, logits = new_cache, new_attn, new_logits
                starts += new_starts
            active += list(range(first, len(prompts)))
    return [(gen[i], lps[i], fed_new[i]) for i in range(len(prompts))]


def _prefill(model, prompts: list[list[int]], store: PrefixCache, pad_id: int):
    """One left-padded forward over the prompts' uncached suffixes on top of their cached prefixes.

    Returns (growing cache [B, heads, width, dim], attention mask [B, width], next-token logits
    [B, vocab], column of each row's first token)."""
    import torch
    from transformers import DynamicCache

    dev = model_device(model)
    hits = [store.lookup(p) for p in prompts]
    # GRPO asks for G samples of each prompt: identical rows are prefilled once and then copied
    first: dict[tuple, int] = {}
    source = [first.setdefault(tuple(p), i) for i, p in enumerate(prompts)]
    B = len(prompts)
    T = [len(p) for p in prompts]
    N = max(t - c for t, (c, _) in zip(T, hits, strict=True))
    used = [max(0, t - N) for t in T]
    U = max(used)
    starts = [U + N - t for t in T]  # column of each row's first real token

    input_ids = torch.full((B, N), pad_id, dtype=torch.long)  # built on the CPU, moved once below
    attn = torch.zeros((B, U + N), dtype=torch.long)
    pos = torch.zeros((B, N), dtype=torch.long)
    for i, p in enumerate(prompts):
        fed = p[used[i]:]
        input_ids[i, N - len(fed):] = torch.tensor(fed, dtype=torch.long)
        attn[i, starts[i]:] = 1
        pos[i, N - len(fed):] = torch.arange(used[i], T[i])
        if source[i] == i:
            store.hit_tokens += used[i]
            store.fed_tokens += len(fed)
        else:  # a copy of an earlier row's prefill
            store.hit_tokens += T[i]
    input_ids, attn, pos = input_ids.to(dev), attn.to(dev), pos.to(dev)

    cache = DynamicCache()
    if U > 0:
        ref = next(e for _, e in hits if e is not None)
        data = []
        for layer, (k0, v0) in enumerate(ref.layers):
            k = torch.zeros((B, k0.shape[0], U, k0.shape[2]), dtype=k0.dtype, device=k0.device)
            v = torch.zeros((B, v0.shape[0], U, v0.shape[2]), dtype=v0.dtype, device=v0.device)
            for i, (_, entry) in enumerate(hits):
                if used[i]:
                    k[i, :, U - used[i]:] = entry.layers[layer][0][:, : used[i]]
                    v[i, :, U - used[i]:] = entry.layers[layer][1][:, : used[i]]
            data.append((k, v))
        cache = DynamicCache(ddp_cache_data=data)

    uniq = sorted(set(source))
    fed_attn = attn
    if len(uniq) < B:  # feed one row per distinct prompt
        sub = torch.tensor(uniq, dtype=torch.long, device=dev)
        input_ids, pos, fed_attn = input_ids[sub], pos[sub], attn[sub]
        if U > 0:
            cache = DynamicCache(ddp_cache_data=[(layer.keys.index_select(0, sub), layer.values.index_select(0, sub))
                                                 for layer in cache.layers])
    out = model(input_ids=input_ids, attention_mask=fed_attn, position_ids=pos, **cache_kwargs(cache),
                use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1, :]
    if len(uniq) < B:  # and copy its keys, values and logits to the rows that share it
        spread = torch.tensor([uniq.index(s) for s in source], dtype=torch.long, device=dev)
        for layer in returned_cache(out).layers:
            layer.keys = layer.keys.index_select(0, spread)
            layer.values = layer.values.index_select(0, spread)
        logits = logits.index_select(0, spread)
    return growing(returned_cache(out)), attn, logits, starts


def _join(cache_a, attn_a, cache_b, attn_b):
    """Stack two batches' caches and masks, left-padding the narrower one (pads are masked out, and
    positions are explicit, so a row's numbers do not change); returns (cache, mask, (left shift of
    a's columns, of b's))."""
    import torch
    import torch.nn.functional as F

    width = max(attn_a.shape[1], attn_b.shape[1])
    shift = (width - attn_a.shape[1], width - attn_b.shape[1])
    for la, lb in zip(cache_a.layers, cache_b.layers, strict=True):
        la.keys = torch.cat([F.pad(la.keys, (0, 0, shift[0], 0)), F.pad(lb.keys, (0, 0, shift[1], 0))], dim=0)
        la.values = torch.cat([F.pad(la.values, (0, 0, shift[0], 0)), F.pad(lb.values, (0, 0, shift[1], 0))], dim=0)
    attn = torch.cat([F.pad(attn_a, (shift[0], 0)), F.pad(attn_b, (shift[1], 0))], dim=0)
    return cache_a, attn, shift


def _store_row(store: PrefixCache, cache, b: int, start: int, ids: list[int]) -> None:
    n = len(ids)
    layers = [(layer.keys[b, :, start: start + n].clone(), layer.values[b, :, start: start + n].clone())
              for layer in cache.layers]
    store.put(ids, layers)


def _prefill_only(model, ids: list[int], store: PrefixCache, pad_id: int) -> None:
    """Compute and store the K/V of ``ids`` (extending the best cached prefix)."""
    import torch
    from transformers import DynamicCache

    have, entry = store.lookup(ids + [pad_id])  # the lookup keeps one token to feed; here all may be cached
    if have >= len(ids):
        return
    cache = DynamicCache()
    if entry is not None and have:
        cache = DynamicCache(ddp_cache_data=[(k[None, :, :have].clone(), v[None, :, :have].clone())
                                             for k, v in entry.layers])
    fed = ids[have:]
    dev = model_device(model)
    out = model(input_ids=torch.tensor([fed], dtype=torch.long, device=dev),
                attention_mask=torch.ones((1, len(ids)), dtype=torch.long, device=dev),
                position_ids=torch.arange(have, len(ids), device=dev)[None, :], **cache_kwargs(cache),
                use_cache=True, logits_to_keep=1)
    store.hit_tokens += have
    store.fed_tokens += len(fed)
    _store_row(store, returned_cache(out), 0, 0, list(ids))
