"""``python -m research_agent.serve``: a local model behind an OpenAI-compatible API on loopback.

One loaded model can then serve several processes (a synthesis job, an eval, ``ask``), and the
``EndpointPolicy`` client is tested against a real server of ours rather than a mock.  Requests
from concurrent clients are merged into batched ``generate`` calls by ``BatchingPolicy``.
Endpoints: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MAX_TOKENS_CAP = 4096


class BadRequest(ValueError):
    """The request body is not a valid completion request."""


def _prompts(body: dict, tok) -> list[list[int]]:
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest("'prompt' is required")
    if isinstance(prompt, str):
        prompt = [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return [prompt]  # one prompt given as token ids
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
    out = []
    for p in prompt:
        if isinstance(p, str):
            out.append(tok.encode(p, add_special_tokens=False))
        elif isinstance(p, list) and all(isinstance(x, int) for x in p):
            out.append(p)
        else:
            raise BadRequest("each prompt must be a string or a list of token ids")
    return out


def _sampling(body: dict) -> tuple[int, float, list[str] | None]:
    try:
        max_tokens = int(body.get("max_tokens", 128))
        temperature = float(body.get("temperature", 0.0))
    except (TypeError, ValueError) as e:
        raise BadRequest(f"bad sampling parameter: {e}") from e
    if not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise BadRequest(f"max_tokens must be between 1 and {MAX_TOKENS_CAP}")
    if not 0.0 <= temperature <= 5.0:
        raise BadRequest("temperature must be between 0 and 5")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise BadRequest("'stop' must be a string or a list of strings")
    return max_tokens, temperature, stop


def _strip_stop(text: str, stop: list[str] | None) -> str:
    """OpenAI semantics: the stop sequence is not part of the returned text."""
    for s in stop or []:
        if text.endswith(s):
            return text[: -len(s)]
    return text


def make_handler(policy, model_name: str):
    tok = policy.tokenizer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:  # quiet by default
            pass

        def _send(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str) -> None:
            self._send(code, {"error": {"message": message, "type": "invalid_request_error" if code < 500
                                        else "server_error"}})

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"ok": True})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                path = self.path.rstrip("/")
                if path.endswith("/completions") and "chat" not in path:
                    self._send(200, self._completions(body))
                elif path.endswith("/chat/completions"):
                    self._send(200, self._chat(body))
                else:
                    self._error(404, f"no route {self.path}")
            except (json.JSONDecodeError, BadRequest) as e:
                self._error(400, str(e))
            except Exception as e:  # the server keeps serving
                self._error(500, f"{type(e).__name__}: {e}")

        def _completions(self, body: dict) -> dict:
            prompts = _prompts(body, tok)
            max_tokens, temperature, stop = _sampling(body)
            gens = policy.generate(prompts, max_new_tokens=max_tokens, temperature=temperature, stop=stop)
            choices = []
            for i, g in enumerate(gens):
                choices.append({"index": i, "text": _strip_stop(g.text, stop),
                                "finish_reason": "length" if g.finish_reason == "length" else "stop",
                                "logprobs": {"token_logprobs": g.logprobs} if body.get("logprobs") else None})
            return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                    "model": model_name, "choices": choices,
                    "usage": {"prompt_tokens": sum(map(len, prompts)),
                              "completion_tokens": sum(len(g.token_ids) for g in gens)}}

        def _chat(self, body: dict) -> dict:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
                raise BadRequest("'messages' must be a non-empty list of {role, content}")
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            max_tokens, temperature, stop = _sampling(body)
            g = policy.generate([list(ids)], max_new_tokens=max_tokens, temperature=temperature, stop=stop)[0]
            return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                    "created": int(time.time()), "model": model_name,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": _strip_stop(g.text, stop)},
                                 "finish_reason": "length" if g.finish_reason == "length" else "stop"}],
                    "usage": {"prompt_tokens": len(ids), "completion_tokens": len(g.token_ids)}}

    return Handler


def make_server(policy, model_name: str, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    from .policy import BatchingPolicy

    batched = policy if isinstance(policy, BatchingPolicy) else BatchingPolicy(policy)
    server = ThreadingHTTPServer((host, port), make_handler(batched, model_name))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research_agent.serve", description=__doc__)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--prefix-cache-mb", type=int, default=1024,
                   help="memory for the prefix KV cache shared by requests (0: off, plain generate)")
    args = p.parse_args(argv)
    if args.prefix_cache_mb < 0:
        p.error("--prefix-cache-mb must be >= 0 (0 turns the cache off)")
    from .policy import load_policy

    policy = load_policy(args.model, adapter=args.adapter, cache_mb=args.prefix_cache_mb)
    server = make_server(policy, args.model, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"serving {args.model} at http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
