"""``python -m research_agent.inference.serve``: a local model behind an OpenAI-compatible API on loopback.

One loaded model can then serve several processes (a synthesis job, an eval, ``ask``), and the
``EndpointPolicy`` client is tested against a real server of ours rather than a mock.  Requests
from concurrent clients are merged into batched ``generate`` calls by ``BatchingPolicy``.
Endpoints: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``, and vLLM's
runtime LoRA API, ``POST /v1/load_lora_adapter`` (``lora_name``, ``lora_path``) and ``POST
/v1/unload_lora_adapter`` (``lora_name``): a request naming a loaded adapter as its ``model`` is
generated with it (each adapter has its own prefix cache, so a new adapter never reads keys and
values computed under an old one), and a request naming an unloaded one is refused with 404.
``/v1/completions`` takes prompts as token ids and, with ``return_tokens_as_token_ids``, answers
the generated token ids themselves (``logprobs.tokens`` as ``"token_id:N"``, as vLLM does), so a
trainer's trajectory holds exactly the tokens that were sampled.  A request's ``seed`` (vLLM's) makes
its sampled completions repeat: each token is drawn from its seed and position, whatever else shares
the batch.

Every request is bounded (``Limits``): its body, its prompts' tokens (prompt + ``max_tokens`` must fit
the model's context), its number of completions (prompts × ``n``), its total tokens and its time.
A request is generated ``chunk_tokens`` at a time, each chunk one batched call, so a long request
yields to others between chunks and one past its deadline stops at the next chunk boundary (504).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, fields

from corpus.service import BoundedHandler, BoundedHTTPServer, RequestRefused

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class Limits:
    """What one request may ask of the server; each bound answers 400 (413 for the body) when passed."""

    max_body_bytes: int = field(default=8 << 20, metadata={"help": "largest request body (413 beyond)"})
    max_context: int = field(default=32768, metadata={
        "help": "cap on the context (prompt + max_tokens), which is otherwise the model's max positions"})
    max_tokens: int = field(default=4096, metadata={"help": "largest max_tokens a request may ask for"})
    max_completions: int = field(default=64, metadata={
        "help": "completions per request: prompts × n (one batch row each)"})
    max_request_tokens: int = field(default=1 << 18, metadata={
        "help": "tokens one request may occupy: completions × (prompt + max_tokens), i.e. its KV cache"})
    request_timeout_s: float = field(default=120.0, metadata={
        "help": "a request still generating after this long is stopped at its next chunk and answered 504 "
                "(EndpointPolicy's client timeout is 120 s: later answers would be thrown away)"})
    chunk_tokens: int = field(default=256, metadata={
        "help": "tokens generated per batched call: a request yields to others and checks its deadline "
                "between chunks (smaller: finer, but each chunk waits for the batcher)"})
    read_timeout_s: float = field(default=10.0, metadata={
        "help": "a connection must deliver each request within this long (idle keep-alive ones are dropped)"})
    max_connections: int = field(default=256, metadata={
        "help": "connections served at once; more wait in the listen backlog"})

    def __post_init__(self) -> None:
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise ValueError(f"{f.name} must be > 0, not {getattr(self, f.name)}")


class BadRequest(ValueError):
    """The request body is not a valid completion request."""


class DeadlineExceeded(Exception):
    """The request ran past ``Limits.request_timeout_s``."""


@dataclass
class Sampling:
    max_tokens: int
    temperature: float
    stop: list[str] | None
    n: int
    seed: int | None = None  # vLLM's per-request seed: the j-th completion of each prompt draws with seed + j


def model_context(policy, cap: int) -> int:
    """The most tokens (prompt + completion) the model takes: its max positions, at most ``cap``."""
    inner = getattr(policy, "policy", policy)  # a BatchingPolicy wraps the model's policy
    config = getattr(getattr(inner, "model", None), "config", None)
    known = [getattr(config, "max_position_embeddings", None), getattr(inner.tokenizer, "model_max_length", None)]
    return min([cap] + [int(x) for x in known if isinstance(x, int) and 0 < x < 10**7])  # tokenizers say 1e30


def _refuse_far_too_long(tok, text: str, limit: int) -> None:
    """Refuse a text far over ``limit`` tokens after tokenizing only its head: tokenizing a whole
    8 MB body takes seconds of CPU to learn the same."""
    head = limit * 8  # characters: most text has 3-5 per token
    if len(text) > head:
        n = len(tok.encode(text[:head], add_special_tokens=False))
        if n > limit + 1:  # +1: the cut may split a word into one token more
            raise BadRequest(f"a prompt has more than {n - 1} tokens; this model's context is {limit}")


def _prompts(body: dict, tok, context: int, vocab: int) -> list[list[int]]:
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest("'prompt' is required")
    if isinstance(prompt, str):
        prompt = [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        prompt = [prompt]  # one prompt given as token ids
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
    out = []
    for p in prompt:
        if isinstance(p, str):
            _refuse_far_too_long(tok, p, context)
            out.append(tok.encode(p, add_special_tokens=False))
        elif isinstance(p, list) and p and all(isinstance(x, int) and 0 <= x < vocab for x in p):
            out.append(p)
        else:
            raise BadRequest(f"each prompt must be a string or a non-empty list of token ids below {vocab}")
    return out


def _sampling(body: dict, limits: Limits) -> Sampling:
    for name in ("stream", "echo"):
        if body.get(name):
            raise BadRequest(f"'{name}' is not supported by this server")
    try:
        max_tokens = int(body.get("max_tokens", 128))
        temperature = float(body.get("temperature", 0.0))
        n = int(body.get("n", 1))
        best_of = int(body.get("best_of") or n)
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an integer, not {seed!r}")
    except (TypeError, ValueError) as e:
        raise BadRequest(f"bad sampling parameter: {e}") from e
    if not 1 <= max_tokens <= limits.max_tokens:
        raise BadRequest(f"max_tokens must be between 1 and {limits.max_tokens}")
    if not 0.0 <= temperature <= 5.0:
        raise BadRequest("temperature must be between 0 and 5")
    if not 1 <= n <= limits.max_completions:
        raise BadRequest(f"n must be between 1 and {limits.max_completions}")
    if best_of != n:
        raise BadRequest("best_of is not supported by this server (leave it out, or equal to n)")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise BadRequest("'stop' must be a string or a list of strings")
    if stop is not None and not (len(stop) <= 16 and all(0 < len(s) <= 256 for s in stop)):
        raise BadRequest("'stop' takes at most 16 strings of 1 to 256 characters (an empty one would match "
                         "at once)")
    return Sampling(max_tokens, temperature, stop or None, n, seed)


def _check_size(prompts: list[list[int]], s: Sampling, context: int, limits: Limits) -> None:
    longest = max(map(len, prompts))
    if longest + s.max_tokens > context:
        raise BadRequest(f"this model's maximum context length is {context} tokens, but the request asks for "
                         f"{longest + s.max_tokens} ({longest} in the prompt, {s.max_tokens} for the "
                         "completion); shorten the prompt or lower max_tokens")
    rows = len(prompts) * s.n
    if rows > limits.max_completions:
        raise BadRequest(f"the request asks for {rows} completions ({len(prompts)} prompts × n={s.n}); "
                         f"this server makes at most {limits.max_completions} per request")
    total = sum(len(p) + s.max_tokens for p in prompts) * s.n
    if total > limits.max_request_tokens:
        raise BadRequest(f"the request spans {total} tokens (completions × (prompt + max_tokens)); this "
                         f"server takes at most {limits.max_request_tokens} per request: send fewer prompts")


def _before(deadline: float, fn, *args, **kw):
    """``fn(*args, **kw)`` if it returns before ``deadline``, else ``DeadlineExceeded`` (``fn`` then
    finishes unheard)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded
    box: dict = {}

    def run() -> None:
        try:
            box["out"] = fn(*args, **kw)
        except BaseException as e:  # handed to the waiting thread
            box["err"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise DeadlineExceeded
    if "err" in box:
        raise box["err"]
    return box["out"]


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" or "length" (OpenAI's names)


def generate_in_chunks(policy, prompts: list[list[int]], s: Sampling, *, chunk: int,
                       deadline: float) -> list[Completion]:
    """``s.n`` completions of each prompt (prompt-major), ``chunk`` tokens per batched ``policy.generate``
    call, each row continuing from its prompt plus what it generated so far (the prefix cache holds
    their keys and values).  Between chunks the deadline is checked; past it, ``DeadlineExceeded``."""
    from .policy import cut_at_stop

    tok = policy.tokenizer
    rows = [Completion([], [], "") for _ in range(len(prompts) * s.n)]
    starts = [p for p in prompts for _ in range(s.n)]
    active = list(range(len(rows)))
    while active:
        want = min(chunk, s.max_tokens - max(len(rows[i].token_ids) for i in active))
        batch = [starts[i] + rows[i].token_ids for i in active]
        # a seeded row draws each token from (seed, its position): chunking does not change it
        seeded = {"seeds": [s.seed + i % s.n for i in active]} if s.seed is not None else {}
        gens = _before(deadline, policy.generate, batch, max_new_tokens=want, temperature=s.temperature,
                       stop=s.stop, **seeded)
        still = []
        for i, g in zip(active, gens, strict=True):
            row, before = rows[i], len(rows[i].token_ids)
            row.token_ids += g.token_ids
            row.logprobs += g.logprobs
            if s.stop and before:  # a stop string across the chunk boundary: the chunk could not see it
                kept, reason = cut_at_stop(tok, row.token_ids, s.stop, set())
                if reason == "stop":
                    row.token_ids, row.logprobs = kept, row.logprobs[: len(kept)]
                    row.finish_reason = "stop"
                    continue
            if g.finish_reason != "length" or not g.token_ids:
                row.finish_reason = "stop"  # EOS, a stop string (or a loop cut)
            elif len(row.token_ids) >= s.max_tokens:
                row.token_ids, row.logprobs = row.token_ids[: s.max_tokens], row.logprobs[: s.max_tokens]
                row.finish_reason = "length"
            else:
                still.append(i)
        active = still
    return rows


def _strip_stop(text: str, stop: list[str] | None) -> str:
    """OpenAI semantics: the stop sequence is not part of the returned text."""
    for s in stop or []:
        if text.endswith(s):
            return text[: -len(s)]
    return text


class Adapters:
    """LoRA adapters loaded while the server runs, by name: each is the pristine base with that adapter
    (and the adapters it was trained on, ``adapters``) applied, behind its own batcher and prefix
    cache. The base is copied, not reloaded, so a load takes a fraction of a second for
    the small models; unloading frees the copy."""

    def __init__(self, policy, cache_bytes: int = 1 << 30):
        self.base_policy = policy  # a BatchingPolicy over the served model's LocalPolicy
        self.cache_bytes = cache_bytes
        self._pristine = None
        self._loaded: dict[str, object] = {}
        self.unloaded: set[str] = set()
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return list(self._loaded)

    def get(self, name: str):
        return self._loaded.get(name)

    def load(self, name: str, path: str) -> None:
        import copy

        from .adapters import AdapterError, load_adapter
        from .policy import BatchingPolicy, LocalPolicy

        inner = self.base_policy.policy
        with self._lock:
            if name in self._loaded:
                raise BadRequest(f"the adapter {name!r} is already loaded; unload it first or use another name")
            if self._pristine is None:
                if hasattr(inner.model, "peft_config"):
                    raise BadRequest("this server was started with --adapter; runtime adapters apply to a plain "
                                     "base model: start it without --adapter")
                self._pristine = inner.model
            try:
                model = load_adapter(copy.deepcopy(self._pristine), path)
            except (AdapterError, OSError, ValueError) as e:
                raise BadRequest(f"cannot load the adapter {name!r} from {path}: {e}") from None
            model.eval()
            local = LocalPolicy(model, inner.tokenizer, name=name, cache_bytes=self.cache_bytes,
                                quantize=getattr(inner, "quantize", "none"))
            self._loaded[name] = BatchingPolicy(local)
            self.unloaded.discard(name)

    def unload(self, name: str) -> None:
        with self._lock:
            policy = self._loaded.pop(name, None)
            if policy is None:
                raise BadRequest(f"no adapter {name!r} is loaded (loaded: {', '.join(self._loaded) or 'none'})")
            self.unloaded.add(name)
        policy.close()


class UnknownModel(LookupError):
    """A request names a model (an adapter) this server does not hold."""


def make_handler(policy, model_name: str, limits: Limits, adapters: Adapters | None = None):
    tok = policy.tokenizer
    context = model_context(policy, limits.max_context)
    vocab = len(tok)
    adapters = adapters if adapters is not None else Adapters(policy)

    def policy_for(body: dict):
        name = body.get("model")
        found = adapters.get(name) if isinstance(name, str) else None
        if found is not None:
            return found
        if name in adapters.unloaded:
            raise UnknownModel(f"the adapter {name!r} was unloaded; load it again or name a loaded model "
                               f"({', '.join([model_name, *adapters.names()])})")
        return policy

    class Handler(BoundedHandler):
        max_body_bytes = limits.max_body_bytes

        def log_message(self, *args) -> None:  # quiet by default
            pass

        def reply_error(self, code: int, message: str) -> None:
            kind = "invalid_request_error" if code < 500 else "timeout" if code == 504 else "server_error"
            self.send_json(code, {"error": {"message": message, "type": kind, "code": code}})

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                data = [{"id": model_name, "object": "model", "max_model_len": context}]
                data += [{"id": n, "object": "model", "parent": model_name, "max_model_len": context}
                         for n in adapters.names()]
                self.send_json(200, {"object": "list", "data": data})
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self.send_json(200, {"ok": True})
            else:
                self.reply_error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            deadline = time.monotonic() + limits.request_timeout_s
            try:
                body = json.loads(self.read_body() or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                path = self.path.rstrip("/")
                if path.endswith("/load_lora_adapter"):
                    name, where = body.get("lora_name"), body.get("lora_path")
                    if not (isinstance(name, str) and name and isinstance(where, str) and where):
                        raise BadRequest("load_lora_adapter takes 'lora_name' and 'lora_path' (strings)")
                    adapters.load(name, where)
                    self.send_json(200, {"ok": True, "lora_name": name})
                elif path.endswith("/unload_lora_adapter"):
                    name = body.get("lora_name")
                    if not isinstance(name, str):
                        raise BadRequest("unload_lora_adapter takes 'lora_name' (a string)")
                    adapters.unload(name)
                    self.send_json(200, {"ok": True, "lora_name": name})
                elif path.endswith("/completions") and "chat" not in path:
                    self.send_json(200, self._completions(body, deadline))
                elif path.endswith("/chat/completions"):
                    self.send_json(200, self._chat(body, deadline))
                else:
                    self.reply_error(404, f"no route {self.path}")
            except RequestRefused as e:
                self.refuse(e)
            except (json.JSONDecodeError, UnicodeDecodeError, BadRequest) as e:
                self.reply_error(400, str(e))
            except UnknownModel as e:
                self.reply_error(404, str(e))
            except DeadlineExceeded:
                self.reply_error(504, f"the request did not finish within the server's {limits.request_timeout_s:g} s "
                                      "(--request-timeout-s); ask for fewer tokens or completions")
            except Exception as e:  # the server keeps serving
                self.reply_error(500, f"{type(e).__name__}: {e}")

        def _generate(self, prompts, s: Sampling, deadline: float, body: dict) -> list[Completion]:
            _check_size(prompts, s, context, limits)
            return generate_in_chunks(policy_for(body), prompts, s, chunk=limits.chunk_tokens, deadline=deadline)

        def _completions(self, body: dict, deadline: float) -> dict:
            s = _sampling(body, limits)
            prompts = _prompts(body, tok, context, vocab)
            rows = self._generate(prompts, s, deadline, body)
            as_ids = bool(body.get("return_tokens_as_token_ids"))

            def logprobs(r: Completion) -> dict | None:
                if not body.get("logprobs") and not as_ids:
                    return None
                out: dict = {"token_logprobs": r.logprobs}
                if as_ids:  # vLLM's form: the sampled ids themselves, nothing to re-tokenize
                    out["tokens"] = [f"token_id:{t}" for t in r.token_ids]
                return out

            choices = [{"index": i, "text": _strip_stop(tok.decode(r.token_ids, skip_special_tokens=True), s.stop),
                        "finish_reason": r.finish_reason, "logprobs": logprobs(r)}
                       for i, r in enumerate(rows)]
            return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                    "model": model_name, "choices": choices,
                    "usage": {"prompt_tokens": sum(map(len, prompts)),
                              "completion_tokens": sum(len(r.token_ids) for r in rows)}}

        def _chat(self, body: dict, deadline: float) -> dict:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
                raise BadRequest("'messages' must be a non-empty list of {role, content}")
            s = _sampling(body, limits)
            _refuse_far_too_long(tok, "\n".join(m["content"] for m in msgs), context)
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            rows = self._generate([list(ids)], s, deadline, body)
            choices = [{"index": i, "finish_reason": r.finish_reason,
                        "message": {"role": "assistant",
                                    "content": _strip_stop(tok.decode(r.token_ids, skip_special_tokens=True), s.stop)}}
                       for i, r in enumerate(rows)]
            return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                    "created": int(time.time()), "model": model_name, "choices": choices,
                    "usage": {"prompt_tokens": len(ids), "completion_tokens": sum(len(r.token_ids) for r in rows)}}

    return Handler


def make_server(policy, model_name: str, host: str = "127.0.0.1", port: int = 0,
                limits: Limits | None = None, cache_bytes: int = 1 << 30) -> BoundedHTTPServer:
    from .policy import BatchingPolicy

    limits = limits or Limits()
    batched = policy if isinstance(policy, BatchingPolicy) else BatchingPolicy(policy)
    adapters = Adapters(batched, cache_bytes=cache_bytes)
    return BoundedHTTPServer((host, port), make_handler(batched, model_name, limits, adapters),
                             max_workers=limits.max_connections, read_timeout_s=limits.read_timeout_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research_agent.inference.serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    from .devices import add_device_flags

    add_device_flags(p, quantize=True)
    p.add_argument("--prefix-cache-mb", type=int, default=1024,
                   help="memory for the prefix KV cache shared by requests (0: off, plain generate)")
    for f in fields(Limits):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                       help=f"{f.metadata['help']} (default {f.default})")
    args = p.parse_args(argv)
    if args.prefix_cache_mb < 0:
        p.error("--prefix-cache-mb must be >= 0 (0 turns the cache off)")
    try:
        limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    except ValueError as e:
        p.error(f"--{str(e).replace('_', '-')}")
    from .devices import DeviceError, use_device
    from .policy import load_policy

    try:
        use_device(args.device, args.dtype)
    except DeviceError as e:
        p.error(str(e))
    policy = load_policy(args.model, adapter=args.adapter, cache_mb=args.prefix_cache_mb, device=args.device,
                         dtype=args.dtype, quantize=args.quantize)
    server = make_server(policy, args.model, args.host, args.port, limits)
    host, port = server.server_address[:2]
    print(f"serving {args.model} at http://{host}:{port}/v1 (context {model_context(policy, limits.max_context)} "
          "tokens)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
