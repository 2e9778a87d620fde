"""Batched decode over a preallocated KV cache, each step one CUDA graph: rollouts that use a GPU.

``prefix_cache.cached_generate`` is the decode loop made for a CPU: every step builds its inputs on
the host, reads the sampled tokens back (``.tolist()``), drops finished rows by copying the cache
and joins admitted ones by padding and concatenating it.  On a GPU each of those is a host
synchronisation or a kernel launch, and one smollm2-135m step was ~1,000 launches: on one H200 the
RL rollouts generated 47.6 tokens/s with the GPU busy a tenth of the time (docs/benchmarks.md, on a
GPU).  ``StaticDecoder`` keeps what that loop does — prompts reuse the prefix store's keys/values
across turns, a group's identical prompts are prefilled once, rows are admitted while others decode
(continuous batching) and answered as they finish, log-probs are the untempered policy's, stop
strings and loops end a row, seeded rows draw from ``seeded_uniform`` — and changes how it runs:

- **Slots.**  The keys/values live in preallocated buffers, per layer ``[slots, kv_heads, capacity,
  head_dim]``; a row owns a slot and its token at sequence position p sits at column p, so a row's
  mask is a prefix of the columns (no left padding, nothing to realign when rows come and go).  A
  finished row's slot is refilled from the queue (``admit``), and the last rows move into the holes
  of finished ones so the live rows are always the first ``n`` slots.
- **One graph per step.**  A step reads and writes only those buffers (tokens fed, positions,
  tokens generated so far, done flags, the output tokens and log-probs), so it is a fixed sequence
  of kernels: on CUDA it is captured once per (rows bucket, columns bucket, greedy or sampled) with
  ``torch.cuda.graphs`` and replayed, one launch per step.  Buckets are powers of two: a step over
  ``b`` rows runs the graph of the next bucket (slots past the live rows are marked done and idle).
- **No host sync in the token loop.**  EOS and the token budget are checked on the device (a row
  that is done stops writing and advancing); the host reads the new tokens every ``sync_every``
  steps in one copy, checks stop strings and loops on them (cutting a row where the loop path
  would have stopped it: what was generated past that point is dropped and its keys/values are
  never stored), answers finished rows, admits new ones and compacts the slots.
- **LoRA stays live.**  The step calls the model's own modules (its norms, rotary embedding, MLP,
  and each linear layer's ``forward``, so peft's LoRA layers compute ``W x + s B(A x)`` from their
  weights where they lie).  An optimizer step updates those weights in place, so the graphs stay
  valid across RL steps with no merge and no re-capture.  Anything that moves a weight's storage
  or swaps a module (an adapter loaded, merged, disabled) changes ``structure`` and the graphs are
  captured again.

Only the attention is our own: the new key/value is written at the row's position, and one
``scaled_dot_product_attention`` per layer reads the first ``L`` columns under the prefix mask, the
query heads of a K/V head folded into the query-length axis (exact grouped-query attention with
no ``enable_gqa`` and no copy of the cache).

Why not transformers' own: its continuous batching (``generate_batch``) schedules its own requests
over its own paged cache; the agent needs the prefix store across turns, per-token log-probs for the
trainer and DeepConf, and the ``admit`` / ``on_done`` interface ``BatchingPolicy`` drives.
``bench/gpu_check.py`` times transformers' batched ``generate`` (and ``generate_batch`` where it runs)
beside this path on the same rows, so a GPU session can tell whether it would be as fast.

On the CPU (graphs off) this path computes the same tokens as ``cached_generate`` up to float
rounding, which is how it is tested (``tests/agent/test_static_decode.py``); the CPU default stays
the loop (``LocalPolicy(decode="auto")`` takes this path on CUDA only).
"""

from __future__ import annotations

import os

from .decode_step import _causal_lm, architecture_supported
from .devices import model_device
from .prefix_cache import (
    PrefixCache,
    _common_prefix,
    _prefill,
    _prefill_only,
    seeded_uniform,
    weights_fingerprint,
)

DECODE_MODES = ("auto", "loop", "static")
SYNC_EVERY = 8  # decode steps between two reads of the new tokens (stop strings, finished rows, admission)
MIN_COLUMNS = 64  # the smallest attention width a graph is captured for
MIN_CAPACITY = 256  # the smallest cache (columns per slot) allocated
EOS_SLOTS = 8  # EOS ids the device compares against (padded with -1, which no token has)


class StaticDecodeError(ValueError):
    """The static decode path was asked for where it cannot run."""


def check_decode(spec: str) -> str:
    spec = str(spec).strip().lower()
    if spec not in DECODE_MODES:
        raise StaticDecodeError(f"decode {spec!r}: use one of {', '.join(DECODE_MODES)}")
    return spec


def supported(model) -> bool:
    """Whether ``StaticDecoder`` computes this model's step: a Llama or Qwen2 decoder (any device)
    whose RoPE frequencies do not depend on the positions fed (a dynamic or long RoPE reads the
    largest position on the host every step)."""
    if not architecture_supported(model):
        return False
    rope = getattr(_causal_lm(model).model.rotary_emb, "rope_type", "default")
    return isinstance(rope, str) and "dynamic" not in rope and rope != "longrope"


def wants_static(model, decode: str = "auto") -> bool:
    """Whether ``decode`` (``auto``, ``loop`` or ``static``; ``auto`` reads ``RESEARCH_AGENT_DECODE``
    first) means the static path for ``model``: ``auto`` takes it on a CUDA device for a supported
    model, so CPU runs keep the loop they were measured with."""
    mode = check_decode(decode)
    if mode == "auto":
        mode = check_decode(os.environ.get("RESEARCH_AGENT_DECODE", "").strip() or "auto")
    if mode == "loop":
        return False
    ok = supported(model)
    if mode == "static":
        if not ok:
            raise StaticDecodeError("decode static needs a Llama or Qwen2 decoder with a static RoPE; "
                                    "use decode loop for this model")
        return True
    return ok and model_device(model).type == "cuda"


def graphs_default(device) -> bool:
    """CUDA graphs on a CUDA device unless ``RESEARCH_AGENT_CUDA_GRAPHS=0`` (then every step runs its
    kernels one by one: the same numbers, for profiling)."""
    return device.type == "cuda" and os.environ.get("RESEARCH_AGENT_CUDA_GRAPHS", "").strip() != "0"


def _pow2(n: int, least: int = 1) -> int:
    b = least
    while b < n:
        b *= 2
    return b


def structure(model) -> tuple:
    """What a captured graph depends on besides the weights' values: every module's identity, every
    parameter's storage, and each LoRA layer's adapter state (disabled, active names, merged)."""
    mods = list(model.modules())
    lora = tuple((bool(getattr(m, "disable_adapters", False)), tuple(getattr(m, "active_adapters", ()) or ()),
                  bool(getattr(m, "merged", False))) for m in mods if hasattr(m, "lora_A"))
    return tuple(id(m) for m in mods), tuple(p.data_ptr() for p in model.parameters()), lora


class _Layers:
    """The modules a step calls, gathered once per generation (see ``decode_step.plan``)."""

    def __init__(self, model):
        lm = _causal_lm(model)
        cfg, inner = lm.config, lm.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.embed, self.rotary, self.norm, self.lm_head = inner.embed_tokens, inner.rotary_emb, inner.norm, lm.lm_head
        self.layers = [(layer.input_layernorm, layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                        layer.self_attn.o_proj, layer.post_attention_layernorm, layer.mlp)
                       for layer in inner.layers[: cfg.num_hidden_layers]]
        self.vocab = self.lm_head.weight.shape[0]
        self.dtype = self.embed.weight.dtype


class _Slots:
    """The device buffers of ``rows`` decode slots: keys/values of ``capacity`` columns per layer and
    the per-row state a step reads and updates in place (``width``: most tokens a row generates)."""

    def __init__(self, lay: _Layers, rows: int, capacity: int, width: int, device, eos: int = EOS_SLOTS):
        import torch

        self.rows, self.capacity, self.width = rows, capacity, width
        shape = (rows, lay.kv_heads, capacity, lay.head_dim)
        # zeros, not empty: columns past a row's length are masked, and a masked NaN would still poison
        # the attention's weighted sum (0 * NaN)
        self.k = [torch.zeros(shape, dtype=lay.dtype, device=device) for _ in lay.layers]
        self.v = [torch.zeros(shape, dtype=lay.dtype, device=device) for _ in lay.layers]
        long = dict(dtype=torch.long, device=device)
        self.tokens = torch.zeros(rows, **long)  # the token each row feeds next
        self.lengths = torch.zeros(rows, **long)  # its position = the columns its slot holds
        self.count = torch.zeros(rows, **long)  # tokens generated
        self.max_new = torch.ones(rows, **long)
        self.done = torch.ones(rows, dtype=torch.bool, device=device)  # free slots are done: they idle
        self.out_tokens = torch.zeros((rows, width), **long)
        self.out_lps = torch.zeros((rows, width), dtype=torch.float32, device=device)
        self.seeded = torch.zeros(rows, dtype=torch.bool, device=device)
        self.seeded_u = torch.zeros((rows, width), dtype=torch.float32, device=device)
        self.eos = torch.full((eos,), -1, **long)
        self.temperature = torch.ones((), dtype=torch.float32, device=device)
        self.arange = torch.arange(rows, **long)
        self.columns = torch.arange(capacity, **long)

    def state(self) -> list:
        """The per-row tensors (moved with a row, saved around a graph's warm-up)."""
        return [self.tokens, self.lengths, self.count, self.max_new, self.done, self.out_tokens, self.out_lps,
                self.seeded, self.seeded_u]

    def grown(self, lay: _Layers, rows: int, capacity: int, width: int, eos: int) -> _Slots:
        """A larger copy (at least this one's sizes), holding this one's rows."""
        new = _Slots(lay, max(rows, self.rows), max(capacity, self.capacity), max(width, self.width),
                     self.tokens.device, max(eos, self.eos.numel()))
        r, c, w = self.rows, self.capacity, self.width
        for dst, src in zip(new.k + new.v, self.k + self.v, strict=True):
            dst[:r, :, :c] = src
        for dst, src in zip(new.state(), self.state(), strict=True):
            if src.dim() == 2:
                dst[:r, :w] = src
            else:
                dst[:r] = src
        new.eos[: self.eos.numel()] = self.eos
        new.temperature.copy_(self.temperature)
        return new


class StaticDecoder:
    """The decode loop over ``_Slots``; one per policy, its buffers and graphs kept between calls.

    ``graphs``: capture each step as a CUDA graph (None: on a CUDA device, see ``graphs_default``).
    ``sync_every``: decode steps between two reads of the generated tokens.  Counters (``steps``,
    ``syncs``, ``captures``) are for benchmarks and tests.
    """

    def __init__(self, *, graphs: bool | None = None, sync_every: int = SYNC_EVERY):
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, not {sync_every}")
        self.graphs, self.sync_every = graphs, sync_every
        self._slots: _Slots | None = None
        self._graphs: dict = {}
        self._key = None
        self._pool = None
        self.steps = self.syncs = self.captures = 0

    def generate(self, model, prompts: list[list[int]], store: PrefixCache, *, max_new_tokens: int,
                 temperature: float, eos_ids: set[int], pad_id: int, stop_hit=None, admit=None, on_done=None,
                 seeds=None) -> list[tuple[list[int], list[float], int]]:
        """``prefix_cache.cached_generate``'s contract: per row (prompts first, then admitted ones),
        (generated ids up to and including the finishing token, their log-probs, ids whose K/V were
        computed); ``admit(active_rows)`` is asked for new prompts at every sync, ``on_done(index, ids,
        logprobs, fed)`` hears of each row as it finishes."""

        store.check_weights(weights_fingerprint(model))
        dev = model_device(model)
        graphs = graphs_default(dev) if self.graphs is None else self.graphs
        if graphs and dev.type != "cuda":
            raise StaticDecodeError(f"CUDA graphs need a CUDA device; the model is on {dev}")
        key = structure(model)
        if key != self._key:  # other modules or moved weights: the graphs would read stale addresses
            self._graphs.clear()
            self._key = key
        lay = _Layers(model)
        eos = sorted(eos_ids)
        max_new = max(1, int(max_new_tokens))
        run = _Run(self, model, lay, store, dev, graphs, max_new, temperature, eos, pad_id, stop_hit, on_done, seeds)
        if len(prompts) > 1:  # a prefix shared by the whole batch (the system prompt) is computed once
            shared = _common_prefix(prompts)
            if shared >= 2 * store.min_prefix and all(store.lookup(p)[0] < shared for p in prompts):
                _prefill_only(model, prompts[0][:shared], store, pad_id)
        run.admit_rows([list(p) for p in prompts])
        while True:
            if run.slot_row:
                run.decode()
                run.sync()
            new = [list(p) for p in admit(len(run.slot_row))] if admit is not None else []
            if new:
                run.admit_rows(new)
            elif not run.slot_row:
                break
        return [run.results[i] for i in range(len(run.prompts))]

    # -- buffers and graphs ------------------------------------------------------------------------------

    def ensure(self, lay: _Layers, rows: int, capacity: int, width: int, eos: int, device) -> _Slots:
        """Slots for at least these sizes (grown by powers of two; growing drops the graphs)."""
        s = self._slots
        rows, capacity, width = _pow2(rows), _pow2(capacity, MIN_CAPACITY), _pow2(width, 16)
        if s is None or s.tokens.device != device or s.k[0].dtype != lay.dtype or len(s.k) != len(lay.layers):
            self._slots = _Slots(lay, rows, capacity, width, device, max(eos, EOS_SLOTS))
            self._graphs.clear()
        elif rows > s.rows or capacity > s.capacity or width > s.width or eos > s.eos.numel():
            self._slots = s.grown(lay, rows, capacity, width, eos)
            self._graphs.clear()
        return self._slots

    def replay(self, lay: _Layers, rows: int, columns: int, sampled: bool, graphs: bool) -> None:
        """One decode step over the first ``rows`` slots attending to ``columns`` columns."""
        self.steps += 1
        if not graphs:
            self._step(lay, rows, columns, sampled)
            return
        graph = self._graphs.get((rows, columns, sampled))
        if graph is None:
            graph = self._capture(lay, rows, columns, sampled)
        graph.replay()

    def _capture(self, lay: _Layers, rows: int, columns: int, sampled: bool):
        import torch

        s = self._slots
        saved = [t[:rows].clone() for t in s.state()]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up (lazy inits, library handles), then the state put back:
            self._step(lay, rows, columns, sampled)  # it wrote the K/V the real step writes again
            for t, old in zip(s.state(), saved, strict=True):
                t[:rows].copy_(old)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # one pool: graphs never run at the same time
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._step(lay, rows, columns, sampled)
        self._graphs[(rows, columns, sampled)] = graph
        self.captures += 1
        return graph

    # -- the step: device tensors in, device tensors out ---------------------------------------------------

    def _step(self, lay: _Layers, rows: int, columns: int, sampled: bool) -> None:
        logits = self._forward(lay, rows, columns)
        chosen, lp = self.choose(logits, slice(0, rows), sampled)
        self.record(slice(0, rows), chosen, lp, advance=True)

    def _forward(self, lay: _Layers, rows: int, columns: int):
        import torch
        import torch.nn.functional as F

        s = self._slots
        heads, kv_heads, hd = lay.heads, lay.kv_heads, lay.head_dim
        groups, half = heads // kv_heads, hd // 2
        pos = s.lengths[:rows]
        at = s.arange[:rows]
        x = lay.embed(s.tokens[:rows, None])  # [rows, 1, hidden]
        cos, sin = lay.rotary(x, pos[:, None])  # [rows, 1, head_dim]: broadcast over heads below
        mask = (s.columns[:columns][None, :] <= pos[:, None])[:, None, None, :]  # its own column included

        def rope(t):
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

        for i, (n1, q_proj, k_proj, v_proj, o_proj, n2, mlp) in enumerate(lay.layers):
            h = n1(x)
            q = rope(q_proj(h).view(rows, heads, hd))
            k = rope(k_proj(h).view(rows, kv_heads, hd))
            s.k[i][at, :, pos] = k
            s.v[i][at, :, pos] = v_proj(h).view(rows, kv_heads, hd)
            # query head j reads K/V head j // groups: fold the group into the query axis
            a = F.scaled_dot_product_attention(q.view(rows, kv_heads, groups, hd), s.k[i][:rows, :, :columns],
                                               s.v[i][:rows, :, :columns], attn_mask=mask)
            x = x + o_proj(a.reshape(rows, 1, heads * hd))
            x = x + mlp(n2(x))
        return lay.lm_head(lay.norm(x))[:, -1]

    def choose(self, logits, rows: slice, sampled: bool):
        """The next token of each row in ``rows`` and its log-prob under the untempered policy: the
        greedy argmax, or a draw by inverting the CDF (``prefix_cache.sample``) from the global
        generator or, for a seeded row, from its precomputed ``seeded_uniform``."""
        import torch

        s = self._slots
        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        if sampled:
            cdf = torch.softmax(logits / s.temperature, dim=-1).cumsum(dim=-1)
            u = torch.rand((cdf.shape[0], 1), dtype=cdf.dtype, device=cdf.device)
            at = s.count[rows].clamp(max=s.width - 1)[:, None]
            u = torch.where(s.seeded[rows, None], s.seeded_u[rows].gather(1, at), u) * cdf[:, -1:]
            chosen = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)
        else:
            chosen = logp.argmax(dim=-1)
        return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)

    def record(self, rows: slice, chosen, lp, *, advance: bool) -> None:
        """Append ``chosen`` to the live rows of ``rows``; ``advance``: the step fed each live row's
        token, which now holds a column.  A row is done at EOS or its token budget."""
        import torch

        s = self._slots
        live = ~s.done[rows]
        at = s.arange[rows]
        col = s.count[rows].clamp(max=s.width - 1)
        s.out_tokens[at, col] = torch.where(live, chosen, s.out_tokens[at, col])
        s.out_lps[at, col] = torch.where(live, lp, s.out_lps[at, col])
        step = live.long()
        s.count[rows] += step
        if advance:
            s.lengths[rows] += step
        s.tokens[rows] = torch.where(live, chosen, s.tokens[rows])
        s.done[rows] |= live & (torch.isin(chosen, s.eos) | (s.count[rows] >= s.max_new[rows]))


class _Run:
    """One ``StaticDecoder.generate`` call's host side: which row is in which slot, what was read."""

    def __init__(self, dec: StaticDecoder, model, lay, store, dev, graphs, max_new, temperature, eos, pad_id,
                 stop_hit, on_done, seeds):
        self.dec, self.model, self.lay, self.store, self.dev, self.graphs = dec, model, lay, store, dev, graphs
        self.max_new, self.temperature, self.eos, self.pad_id = max_new, float(temperature), eos, pad_id
        self.eos_set = set(eos)
        self.sampled = self.temperature > 0
        self.stop_hit, self.on_done = stop_hit, on_done
        if seeds is None:
            self.seed_of = lambda i: None
        elif callable(seeds):
            self.seed_of = seeds
        else:
            listed = list(seeds)
            self.seed_of = lambda i: listed[i] if i < len(listed) else None
        self.prompts: list[list[int]] = []
        self.results: dict[int, tuple] = {}
        self.slot_row: list[int] = []  # the row in each live slot (slots 0..n-1)
        self.length: list[int] = []  # host copies per slot, as of the last sync or admission
        self.count: list[int] = []
        self.checked: dict[int, int] = {}  # tokens of a row already checked for a stop

    def admit_rows(self, prompts: list[list[int]]) -> None:
        """Prefill ``prompts`` (through ``model(...)`` on top of the prefix store), copy each one's
        keys/values into a free slot and draw its first token."""
        import torch

        first, n0, B = len(self.prompts), len(self.slot_row), len(prompts)
        self.prompts += prompts
        lengths = [len(p) for p in prompts]
        s = self.dec.ensure(self.lay, n0 + B, max(lengths) + self.max_new, self.max_new, len(self.eos), self.dev)
        s.eos.fill_(-1)
        if self.eos:
            s.eos[: len(self.eos)] = torch.tensor(self.eos, dtype=torch.long, device=self.dev)
        s.temperature.fill_(self.temperature if self.sampled else 1.0)
        cache, attn, logits, starts = _prefill(self.model, prompts, self.store, self.pad_id)
        width = attn.shape[1]
        src_row = torch.tensor([i for i, t in enumerate(lengths) for _ in range(t)], device=self.dev)
        src_col = torch.tensor([c for i in range(B) for c in range(starts[i], width)], device=self.dev)
        dst_slot = src_row + n0
        dst_col = torch.tensor([c for t in lengths for c in range(t)], device=self.dev)
        for i, layer in enumerate(cache.layers):
            s.k[i][dst_slot, :, dst_col] = layer.keys[src_row, :, src_col]
            s.v[i][dst_slot, :, dst_col] = layer.values[src_row, :, src_col]
        del cache
        new = slice(n0, n0 + B)
        s.lengths[new] = torch.tensor(lengths, dtype=torch.long, device=self.dev)
        s.count[new] = 0
        s.max_new[new] = self.max_new
        s.done[new] = False
        seeds = [self.seed_of(first + i) for i in range(B)]
        s.seeded[new] = torch.tensor([x is not None for x in seeds], device=self.dev)
        for i, seed in enumerate(seeds):
            if seed is not None:  # the uniforms of the positions this row will draw at
                s.seeded_u[n0 + i, : self.max_new] = torch.tensor(
                    [seeded_uniform(seed, lengths[i] + j) for j in range(self.max_new)], dtype=torch.float32)
        chosen, lp = self.dec.choose(logits, new, self.sampled)
        self.dec.record(new, chosen, lp, advance=False)
        for i in range(B):
            self.slot_row.append(first + i)
            self.checked[first + i] = 0
        self.length += lengths
        self.count += [1] * B

    def decode(self) -> None:
        """``sync_every`` steps (fewer when every row's budget ends sooner), no host read between."""
        n = len(self.slot_row)
        k = max(1, min(self.dec.sync_every, max(self.max_new - c for c in self.count)))
        s = self.dec._slots
        rows = min(_pow2(n), s.rows)
        columns = min(_pow2(max(self.length) + k, MIN_COLUMNS), s.capacity)
        for _ in range(k):
            self.dec.replay(self.lay, rows, columns, self.sampled, self.graphs)

    def sync(self) -> None:
        """Read the new tokens, answer the rows that finished, and compact the live rows into the
        first slots."""
        import torch

        dec, s = self.dec, self.dec._slots
        dec.syncs += 1
        n = len(self.slot_row)
        counts = s.count[:n].tolist()
        lengths = s.lengths[:n].tolist()
        width = max(counts)
        tokens = s.out_tokens[:n, :width].tolist()
        lps = s.out_lps[:n, :width].tolist()
        finished = []
        for j, row in enumerate(self.slot_row):
            end = self._finish_point(tokens[j], self.checked[row], counts[j])
            if end is None:
                self.checked[row] = counts[j]
                continue
            finished.append(j)
            ids, fed = tokens[j][:end], end - 1
            prompt = self.prompts[row]
            upto = len(prompt) + fed
            self.store.put(prompt + ids[:fed], [(s.k[i][j, :, :upto].clone(), s.v[i][j, :, :upto].clone())
                                                for i in range(len(s.k))])
            self.results[row] = (ids, lps[j][:end], fed)
            if self.on_done is not None:
                self.on_done(row, ids, lps[j][:end], fed)
        self.length, self.count = lengths, counts
        if not finished:
            return
        gone = set(finished)
        keep = n - len(gone)
        holes = [j for j in finished if j < keep]
        movers = [j for j in range(keep, n) if j not in gone]
        if movers:  # the last live rows move into the holes
            src = torch.tensor(movers, dtype=torch.long, device=self.dev)
            dst = torch.tensor(holes, dtype=torch.long, device=self.dev)
            upto = max(lengths[j] for j in movers) + 1
            for buf in s.k + s.v:
                buf[dst, :, :upto] = buf[src, :, :upto]
            for t in s.state():
                t[dst] = t[src]
            for a, b in zip(holes, movers, strict=True):
                self.slot_row[a], self.length[a], self.count[a] = self.slot_row[b], lengths[b], counts[b]
        s.done[keep:n] = True  # freed: they idle in a bucket's spare rows
        del self.slot_row[keep:], self.length[keep:], self.count[keep:]

    def _finish_point(self, ids: list[int], checked: int, count: int) -> int | None:
        """The number of tokens a row keeps if it finished among ``ids[checked:count]``: the first
        EOS, the budget, or the first prefix ``stop_hit`` accepts (checked token by token, as the
        loop checks it after every step)."""
        eos = self.eos_set
        for n in range(checked + 1, count + 1):
            if ids[n - 1] in eos or n >= self.max_new or (self.stop_hit is not None and self.stop_hit(ids[:n])):
                return n
        return None
