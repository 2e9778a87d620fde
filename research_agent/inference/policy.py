"""Policy backends: one small interface for a local transformers model and any OpenAI-compatible server.

The agent keeps each trajectory as one token stream, so ``generate`` takes prompt token ids and
returns the generated ids with their log-probabilities: the trainer needs exactly the tokens the
model produced, and DeepConf filtering needs their confidence.  ``BatchingPolicy`` merges the
``generate`` calls of concurrently running trajectories into one batched ``model.generate`` call,
which is what makes rollouts on a CPU affordable.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Protocol

from corpus import openmp

from .fast_linear import DecodeLayers


class PolicyError(RuntimeError):
    """Generation failed (unreachable endpoint, bad response, model error)."""


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (a stop string), "eos", "length" or "loop" (see ``stop_loops``)


class Policy(Protocol):
    tokenizer: object
    name: str

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        stop_loops: bool = False,
        seeds: list[int | None] | None = None,
    ) -> list[Generation]:
        """``seeds`` (per prompt; only passed when one is set): a sampled prompt with a seed draws the
        same tokens whenever it is asked again with it (a redrawn turn of an eval, a vLLM ``seed``)."""


# A turn "ends in a loop" when its last tokens are one block of at most LOOP_PERIOD tokens repeated
# at least LOOP_REPEATS times, over at least LOOP_SPAN tokens.  Small models fall into such loops
# (the same import line, the same sentence) and then fill every turn to its token limit: in the
# smollm2 code runs here half of all generated tokens were loop repeats, and greedy decoding never
# left one.  Real code rarely repeats a whole block four times in a row (in the qwen runs the only
# hits were a sample output looping forever, in tasks that failed).
LOOP_PERIOD, LOOP_REPEATS, LOOP_SPAN = 64, 4, 48


def ends_in_loop(ids: list[int]) -> bool:
    """Whether ``ids`` ends in LOOP_REPEATS or more repeats of one block (see LOOP_PERIOD)."""
    n = len(ids)
    if n < LOOP_SPAN:
        return False
    last = ids[-1]
    for p in range(1, LOOP_PERIOD + 1):
        span = max(p * LOOP_REPEATS, LOOP_SPAN)
        if span > n:
            break
        if ids[-1 - p] == last and ids[n - span: n - p] == ids[n - span + p:]:
            return True
    return False


def cut_at_loop(ids: list[int]) -> tuple[list[int], bool]:
    """``ids`` up to the first point where they end in a loop (kept: the model wrote it), and
    whether there was one."""
    for n in range(LOOP_SPAN, len(ids) + 1):
        if ends_in_loop(ids[:n]):
            return ids[:n], True
    return ids, False


def _finish(tokenizer, ids: list[int], lps: list[float], stop, eos_ids: set[int], stop_loops: bool) -> Generation:
    kept, reason = cut_at_stop(tokenizer, ids, stop, eos_ids)
    if stop_loops:
        kept, looped = cut_at_loop(kept)
        reason = "loop" if looped else reason
    return Generation(tokenizer.decode(kept, skip_special_tokens=True), kept, lps[: len(kept)], reason)


def cut_at_stop(tokenizer, ids: list[int], stop: list[str] | None, eos_ids: set[int]) -> tuple[list[int], str]:
    """Truncate ``ids`` just after the first stop string or before the first EOS.

    Returns the kept ids and the finish reason.  The stop string itself is kept: it is part of
    the action the model wrote, and training must teach the model to write it.
    """
    for i, t in enumerate(ids):
        if t in eos_ids:
            ids = ids[:i]
            reason = "eos"
            break
    else:
        reason = "length"
    if stop:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        ends = [text.find(s) + len(s) for s in stop if s in text]
        if ends:
            end = min(ends)
            lo, hi = 1, len(ids)
            while lo < hi:  # smallest prefix whose text reaches the stop string
                mid = (lo + hi) // 2
                if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= end:
                    hi = mid
                else:
                    lo = mid + 1
            return ids[:lo], "stop"
    return ids, reason


class LocalPolicy:
    """A transformers causal LM (optionally with a peft LoRA adapter), batched generation.

    With ``prefix_cache`` (the default) generation runs our own decode loop over
    ``research_agent.inference.prefix_cache``: every turn of a trajectory reuses the keys/values of the
    turns before it, and concurrent trajectories share the system prompt's.  ``prefix_cache=False``
    calls plain ``model.generate`` on the whole prompt (the reference the cache is tested against).

    ``decode`` picks how the cached path decodes: ``loop`` (``prefix_cache.cached_generate``, made
    for a CPU), ``static`` (``static_decode.StaticDecoder``: slots in a preallocated KV cache, each
    step one CUDA graph on a GPU) or ``auto`` (``RESEARCH_AGENT_DECODE`` if set, else static on a
    CUDA device and the loop on the CPU).  ``graphs`` (None: on CUDA) and ``sync_every`` tune the
    static path.
    """

    def __init__(self, model, tokenizer, name: str = "local", *, prefix_cache: bool = True,
                 cache_bytes: int = 1 << 30, quantize: str = "none", decode: str = "auto",
                 graphs: bool | None = None, sync_every: int | None = None):
        from .prefix_cache import PrefixCache
        from .static_decode import SYNC_EVERY, check_decode

        self.decode = check_decode(decode)
        self._static = None
        self._static_args = {"graphs": graphs, "sync_every": sync_every or SYNC_EVERY}
        self.model = model
        self.cache = PrefixCache(max_bytes=cache_bytes) if prefix_cache else None
        self.tokenizer = tokenizer
        self.name = name
        eos = tokenizer.eos_token_id
        self.eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self.eos_ids.add(gen_eos)
        elif gen_eos:
            self.eos_ids.update(gen_eos)
        self._lock = threading.Lock()
        from .fast_linear import CALIBRATION_TEXT, check_quantize

        quantize, calibration = check_quantize(quantize), None
        if quantize == "int8":

            calibration = tokenizer.encode(CALIBRATION_TEXT)
        self._decode = DecodeLayers(quantize=quantize, calibration=calibration)
        self.quantize = self._decode.quantize
        if self.decode == "static" and self.quantize != "none":
            raise ValueError("decode static runs the model's own weights; --quantize int8 is the CPU loop's")

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None,
                 stop_loops=False, seeds=None) -> list[Generation]:
        """``stop_loops`` ends a row once it ends in a loop (``ends_in_loop``; finish reason "loop").
        A seeded row samples from ``prefix_cache.seeded_uniform`` (the cached path) or from a torch
        generator seeded with it (plain ``generate``, one row at a time): each path repeats itself."""
        if not prompts:
            return []
        if self.cache is not None:
            return self._generate_cached(prompts, max_new_tokens, temperature, stop, stop_loops, seeds=seeds)
        if seeds is not None and temperature > 0 and any(x is not None for x in seeds):
            return [self._generate_plain_seeded(p, seed, max_new_tokens, temperature, stop, stop_loops)
                    for p, seed in zip(prompts, seeds, strict=True)]
        return self._generate_plain(prompts, max_new_tokens, temperature, stop, stop_loops)

    def _generate_plain_seeded(self, prompt, seed, max_new_tokens, temperature, stop, stop_loops) -> Generation:
        import torch

        if seed is None:
            return self._generate_plain([prompt], max_new_tokens, temperature, stop, stop_loops)[0]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed & ((1 << 63) - 1))
            return self._generate_plain([prompt], max_new_tokens, temperature, stop, stop_loops)[0]

    def _generate_cached(self, prompts, max_new_tokens, temperature, stop, stop_loops, admit=None,
                         on_done=None, seeds=None) -> list[Generation]:
        import torch

        from .prefix_cache import cached_generate

        tok = self.tokenizer
        stop_hit = None
        if stop or stop_loops:
            def stop_hit(ids, _stop=tuple(stop or ())):  # the tail is enough: stop strings are a few tokens
                if stop_loops and ends_in_loop(ids):
                    return True
                text = tok.decode(ids[-16:], skip_special_tokens=True)
                return any(s in text for s in _stop)
        pad = tok.pad_token_id if tok.pad_token_id is not None else min(self.eos_ids)
        with self._lock, torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            try:
                done = None
                if on_done is not None:
                    def done(i, ids, lps, _fed):
                        on_done(i, _finish(tok, list(ids), list(lps), stop, self.eos_ids, stop_loops))
                static = self.static_decoder()
                if static is not None:  # the model's own layers (LoRA live), no DecodeLayers swaps
                    rows = static.generate(self.model, [list(p) for p in prompts], self.cache,
                                           max_new_tokens=max(1, max_new_tokens), temperature=temperature,
                                           eos_ids=self.eos_ids, pad_id=pad, stop_hit=stop_hit, admit=admit,
                                           on_done=done, seeds=seeds)
                else:
                    with self._decode.applied(self.model):
                        rows = cached_generate(self.model, [list(p) for p in prompts], self.cache,
                                               max_new_tokens=max(1, max_new_tokens), temperature=temperature,
                                               eos_ids=self.eos_ids, pad_id=pad, stop_hit=stop_hit,
                                               admit=admit, on_done=done, seeds=seeds)
            finally:
                if was_training:
                    self.model.train()
        return [_finish(tok, ids, lps, stop, self.eos_ids, stop_loops) for ids, lps, _ in rows]

    def static_decoder(self):
        """The ``StaticDecoder`` this policy decodes with, or None for the loop (see ``decode``); made
        on first use and kept, with its buffers and captured graphs, for the policy's life."""
        if self.cache is None or self.quantize != "none":
            return None
        from .static_decode import StaticDecoder, wants_static

        if not wants_static(self.model, self.decode):
            return None
        if self._static is None:
            self._static = StaticDecoder(**self._static_args)
        return self._static

    @property
    def continuous(self) -> bool:
        """Whether ``generate_continuous`` can take new prompts into a running batch (the cached path)."""
        return self.cache is not None

    def generate_continuous(self, prompts, *, admit, on_done, max_new_tokens=128, temperature=0.0, stop=None,
                            stop_loops=False, seeds=None) -> list[Generation]:
        """``generate`` that also starts the prompts ``admit(active_rows)`` returns between decode steps
        and reports each row to ``on_done(index, generation)`` as it finishes (continuous batching;
        see ``prefix_cache.cached_generate``).  Returns every row's generation, in arrival order.
        ``seeds``: a function of the row index (admitted rows included), or a list."""
        if not self.continuous:
            raise ValueError("continuous batching needs the prefix-cache decode loop (prefix_cache=True)")
        return self._generate_cached(prompts, max_new_tokens, temperature, stop, stop_loops, admit, on_done, seeds)

    def _generate_plain(self, prompts, max_new_tokens, temperature, stop, stop_loops) -> list[Generation]:
        import torch

        from .devices import model_device

        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p):] = 1
        dev = model_device(self.model)
        input_ids, attention = input_ids.to(dev), attention.to(dev)
        kwargs = dict(
            max_new_tokens=max(1, max_new_tokens),
            pad_token_id=pad,
            eos_token_id=sorted(self.eos_ids),
            output_logits=True,
            return_dict_in_generate=True,
        )
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:
            kwargs.update(stop_strings=stop, tokenizer=self.tokenizer)
        with self._lock, torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            try:
                with self._decode.applied(self.model):
                    out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
            finally:
                if was_training:
                    self.model.train()
        new = out.sequences[:, width:]
        # log-probs under the untempered policy: what the trainer and DeepConf measure
        # (one step at a time: a stacked [batch, steps, vocab] tensor would be large)
        chosen = torch.stack([torch.log_softmax(step_logits.float(), dim=-1).gather(-1, new[:, i: i + 1]).squeeze(-1)
                              for i, step_logits in enumerate(out.logits)], dim=1)
        # a loop is cut afterwards here: the same tokens as the cached path, which stops generating there
        return [_finish(self.tokenizer, new[i].tolist(), chosen[i].tolist(), stop, self.eos_ids, stop_loops)
                for i in range(len(prompts))]


class EndpointPolicy:
    """Any OpenAI-compatible ``/v1/completions`` server (vLLM, SGLang, ``research_agent.inference.serve``).

    The prompt travels as text; the returned text is re-tokenized locally so the trajectory
    still holds token ids (log-probs come back when the server provides them).  With
    ``token_ids=True`` (what training needs) it works in token space instead: prompts are sent as
    token ids and the completion comes back as the sampled ids with their log-probs (vLLM's
    ``return_tokens_as_token_ids``), so nothing is re-tokenized and the trajectory holds exactly the
    tokens that were sampled.  ``model`` may be changed between calls (``model_name``): the trainer
    points it at each adapter it publishes.
    """

    def __init__(self, base_url: str, model: str, tokenizer, *, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None, token_ids: bool = False):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model_name = model
        self.name = f"{model}@{base_url}"
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.retries = retries
        self.api_key = api_key
        self.token_ids = token_ids
        eos = tokenizer.eos_token_id
        self.eos_ids = {eos} if isinstance(eos, int) else set(eos or [])

    def post(self, path: str, payload: dict) -> dict:
        """POST ``payload`` to ``path`` under the server's ``/v1`` (retried with backoff, as every call)."""
        return self._post(path, payload)

    def _post(self, path: str, payload: dict) -> dict:
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                last = e
                if e.code < 500 and e.code != 429:
                    body = e.read().decode(errors="replace")[:300]
                    raise PolicyError(f"endpoint {self.base_url} rejected the request ({e.code}): {body}") from e
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as e:
                last = e
            if attempt < self.retries:
                time.sleep(min(8.0, 0.5 * 2**attempt))
        raise PolicyError(f"endpoint {self.base_url} unreachable after {self.retries + 1} tries: {last}")

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None,
                 stop_loops=False, seeds=None) -> list[Generation]:
        """``stop_loops`` cuts a loop from the returned text (the server generated it all).  A seeded
        prompt goes in a request of its own with vLLM's per-request ``seed``."""
        if seeds is not None and any(x is not None for x in seeds):
            out: list = [None] * len(prompts)
            plain = [i for i, x in enumerate(seeds) if x is None]
            if plain:
                for i, g in zip(plain, self.generate([prompts[i] for i in plain], max_new_tokens=max_new_tokens,
                                                     temperature=temperature, stop=stop, stop_loops=stop_loops),
                                strict=True):
                    out[i] = g
            for i, seed in enumerate(seeds):
                if seed is not None:
                    out[i] = self._request([prompts[i]], max_new_tokens, temperature, stop, stop_loops, seed)[0]
            return out
        return self._request(prompts, max_new_tokens, temperature, stop, stop_loops, None)

    def _request(self, prompts, max_new_tokens, temperature, stop, stop_loops, seed) -> list[Generation]:
        """One ``/completions`` request for ``prompts``."""
        if self.token_ids:
            return self._generate_ids(prompts, max_new_tokens, temperature, stop, stop_loops, seed)
        texts = [self.tokenizer.decode(p, skip_special_tokens=False) for p in prompts]
        payload = {"model": self.model_name, "prompt": texts, "max_tokens": max_new_tokens,
                   "temperature": temperature, "logprobs": 1}
        if stop:
            payload["stop"] = stop
        if seed is not None:
            payload["seed"] = int(seed) & ((1 << 63) - 1)
        body = self._post("/completions", payload)
        try:
            choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
        except (KeyError, TypeError) as e:
            raise PolicyError(f"endpoint returned no choices: {str(body)[:300]}") from e
        results = []
        for choice in choices:
            text = choice.get("text", "")
            reason = choice.get("finish_reason") or "stop"
            # vLLM names what ended the row: the stop string it matched, a token id, or None for EOS
            matched = choice.get("stop_reason", "")
            if reason == "stop" and "stop_reason" in choice and matched is None:
                reason = "eos"
            if stop and reason == "stop" and not any(text.endswith(s) for s in stop):
                # OpenAI servers drop the stop string; put back the one that fired (vLLM says which;
                # others: the one that closes the open action). The code agent needs it to tell a
                # bare ``` line from the end of a turn.
                opened = [matched] if matched in stop else [s for s in stop if s.replace("/", "") in text]
                if opened:
                    text += opened[-1]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
            lp = [float(x) if x is not None else 0.0 for x in lp][: len(ids)]
            lp += [0.0] * (len(ids) - len(lp))
            reason = reason if reason in ("stop", "length") else "eos"
            if stop_loops:
                cut, looped = cut_at_loop(ids)
                if looped:
                    ids, lp, text, reason = cut, lp[: len(cut)], self.tokenizer.decode(cut), "loop"
            results.append(Generation(text, ids, lp, reason))
        if len(results) != len(prompts):
            raise PolicyError(f"endpoint returned {len(results)} choices for {len(prompts)} prompts")
        return results

    def _generate_ids(self, prompts, max_new_tokens, temperature, stop, stop_loops, seed=None) -> list[Generation]:
        payload = {"model": self.model_name, "prompt": [list(map(int, p)) for p in prompts],
                   "max_tokens": max_new_tokens, "temperature": temperature, "logprobs": 0,
                   "return_tokens_as_token_ids": True, "skip_special_tokens": False}
        if stop:
            payload["stop"] = stop
        if seed is not None:
            payload["seed"] = int(seed) & ((1 << 63) - 1)
        body = self._post("/completions", payload)
        try:
            choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
            results = []
            for choice in choices:
                lp = choice["logprobs"]
                ids = [int(str(t).rpartition("token_id:")[2]) for t in lp["tokens"]]
                lps = [float(x) if x is not None else 0.0 for x in lp["token_logprobs"]]
                # the same cut as the local policy: at the stop string (kept) or before EOS
                results.append(_finish(self.tokenizer, ids, lps + [0.0] * (len(ids) - len(lps)), stop,
                                       self.eos_ids, stop_loops))
        except (KeyError, TypeError, ValueError) as e:
            raise PolicyError(f"endpoint {self.base_url} did not return token ids (it needs vLLM's "
                              f"return_tokens_as_token_ids): {str(body)[:300]}") from e
        if len(results) != len(prompts):
            raise PolicyError(f"endpoint returned {len(results)} choices for {len(prompts)} prompts")
        return results


_CLOSE = object()  # queued by BatchingPolicy.close: the worker ends after the requests before it


class BatchingPolicy:
    """Merge concurrent single-prompt ``generate`` calls into batched calls of the wrapped policy.

    Trajectories run in threads; each asks for one generation at a time.  A worker waits up to
    ``wait_s`` for more requests with the same sampling settings, then serves them with one call.
    Without this, 8 concurrent trajectories would run 8 sequential ``generate`` calls.

    The worker is the one thread that computes, so the thread that makes this policy gives its
    OpenMP pool back, and the worker gives its own back whenever it runs out of requests
    (``corpus.openmp``): an idle pool in any other thread makes every parallel region of the busy
    one wake its threads through the kernel, up to twice the time per decoded token.
    """

    def __init__(self, policy, max_batch: int = 16, wait_s: float = 0.05):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.name = policy.name
        self.max_batch = max_batch
        self.wait_s = wait_s
        self._queue: queue.Queue = queue.Queue()
        openmp.release()  # this thread's pool (from loading the model, say) would slow the worker's
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()
        self.calls = 0  # batched calls made, for benchmarks and tests

    def close(self) -> None:
        """Stop the worker thread once the requests queued before this call are served."""
        if self._worker.is_alive():
            self._queue.put(_CLOSE)
            self._worker.join()

    def __enter__(self) -> BatchingPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None,
                 stop_loops=False, seeds=None) -> list[Generation]:
        key = (max_new_tokens, float(temperature), tuple(stop or ()), bool(stop_loops))
        done = threading.Event()
        slot: dict = {}
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        seeds = list(seeds) if seeds is not None and any(x is not None for x in seeds) else None
        self._queue.put((key, list(prompts), slot, done, seeds))
        done.wait()
        if "error" in slot:
            raise slot["error"]
        return slot["result"]

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get_nowait()
            except queue.Empty:  # idle: the pool goes back until the next request
                openmp.release()
                first = self._queue.get()
            if first is _CLOSE:
                return
            pending = [first]
            deadline = time.monotonic() + self.wait_s
            size = len(first[1])
            while size < self.max_batch:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    break
                if item is _CLOSE:  # served after what is already collected
                    self._queue.put(_CLOSE)
                    break
                pending.append(item)
                size += len(item[1])
            groups: dict = {}
            for item in pending:
                groups.setdefault(item[0], []).append(item)
            for key, items in groups.items():
                if getattr(self.policy, "continuous", False):
                    self._serve_continuous(key, items)
                    continue
                max_new, temp, stop, loops = key
                flat = [p for it in items for p in it[1]]
                seeded = any(it[4] for it in items)  # only then is ``seeds`` passed (any policy takes the rest)
                extra = {"seeds": [x for it in items for x in (it[4] or [None] * len(it[1]))]} if seeded else {}
                try:
                    out = self.policy.generate(flat, max_new_tokens=max_new, temperature=temp,
                                               stop=list(stop) or None, stop_loops=loops, **extra)
                    self.calls += 1
                    pos = 0
                    for it in items:
                        it[2]["result"] = out[pos: pos + len(it[1])]
                        pos += len(it[1])
                except Exception as e:  # handed to the caller's thread
                    for it in items:
                        it[2]["error"] = e
                for it in items:
                    it[3].set()

    def _serve_continuous(self, key, items) -> None:
        """Serve ``items`` with one continuous-batching call that also takes in requests with the same
        settings arriving while it runs (up to ``max_batch`` rows at once), answering each request
        as soon as its rows finish.  Requests with other settings wait for the next call."""
        max_new, temp, stop, loops = key
        rows: list[tuple] = []  # row index -> (item, position in the item)
        results: dict[int, list] = {}
        left: dict[int, int] = {}
        deferred: list = []  # other settings: served by a later call
        held: list = []  # these settings, waiting for room in the batch

        def take(items_):
            prompts = []
            for it in items_:
                results[id(it)] = [None] * len(it[1])
                left[id(it)] = len(it[1])
                rows.extend((it, j) for j in range(len(it[1])))
                prompts += it[1]
            return prompts

        def admit(active: int) -> list:
            new = []
            while True:
                if held:
                    it = held[0]
                else:
                    try:
                        it = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if it is _CLOSE or it[0] != key:
                        deferred.append(it)
                        continue
                if active > 0 and active + len(it[1]) > self.max_batch:
                    if not held:
                        held.append(it)  # tried again when rows finish
                    break
                if held:
                    held.pop()
                new.append(it)
                active += len(it[1])
            return take(new)

        def on_done(index: int, generation) -> None:
            it, j = rows[index]
            results[id(it)][j] = generation
            left[id(it)] -= 1
            if left[id(it)] == 0:
                it[2]["result"] = results[id(it)]
                it[3].set()

        def seed_of(index: int):
            it, j = rows[index]
            return it[4][j] if it[4] else None

        prompts = take(items)
        self.calls += 1  # counted up front: callers hear of their rows before the call returns
        try:
            self.policy.generate_continuous(prompts, admit=admit, on_done=on_done, max_new_tokens=max_new,
                                            temperature=temp, stop=list(stop) or None, stop_loops=loops,
                                            seeds=seed_of)
        except Exception as e:  # handed to every caller still waiting
            for it, _ in rows:
                if not it[3].is_set():
                    it[2]["error"] = e
                    it[3].set()
        for it in held + deferred:
            self._queue.put(it)


def load_policy(model: str = "qwen2.5-coder-0.5b", adapter: str | None = None, endpoint: str | None = None,
                *, progress: bool = True, cache_mb: int = 1024, device: str = "auto", dtype: str = "auto",
                quantize: str = "none", decode: str = "auto") -> Policy:
    """The policy for a model name/path (local, on ``device`` in ``dtype``) or an OpenAI-compatible
    endpoint URL (which runs wherever its server does).

    ``cache_mb`` bounds a local policy's prefix KV cache (0 turns it off: plain ``generate``);
    ``quantize="int8"`` decodes through int8 weights (``fast_linear.DecodeLayers``; CPU only);
    ``decode`` is ``LocalPolicy``'s (auto: the static, graph-captured decode on a GPU)."""
    from .models import load_model, resolve_model_dir

    if endpoint:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(resolve_model_dir(model, progress=progress))
        return EndpointPolicy(endpoint, model, tok)
    net, tok = load_model(model, progress=progress, device=device, dtype=dtype)
    if adapter:
        from .adapters import load_adapter

        net = load_adapter(net, adapter)  # an RL adapter sits on top of the merged SFT adapter
        net.eval()
    if cache_mb < 0:
        raise ValueError(f"cache_mb must be >= 0 (0 disables the prefix cache), not {cache_mb}")
    return LocalPolicy(net, tok, name=model if not adapter else f"{model}+{adapter}", prefix_cache=cache_mb > 0,
                       cache_bytes=cache_mb << 20, quantize=quantize, decode=decode)
