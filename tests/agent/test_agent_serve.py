"""Our OpenAI-compatible server on loopback, and the endpoint policy talking to it."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request

import pytest

from research_agent.agent import AgentConfig, ResearchAgent
from research_agent.policy import EndpointPolicy, LocalPolicy, PolicyError
from research_agent.serve import make_server


@pytest.fixture(scope="module")
def server(smol):
    model, tok = smol
    srv = make_server(LocalPolicy(model, tok, "smollm2-135m"), "smollm2-135m")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _post(url, payload):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_completions_match_local_greedy_generation(server, smol):
    model, tok = smol
    ids = tok.apply_chat_template([{"role": "user", "content": "Name a colour."}], add_generation_prompt=True,
                                  tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "input_ids") else ids)
    local = LocalPolicy(model, tok).generate([ids], max_new_tokens=8)[0]
    remote = EndpointPolicy(server, "smollm2-135m", tok).generate([ids], max_new_tokens=8)[0]
    assert remote.text == local.text
    assert len(remote.logprobs) == len(remote.token_ids) and all(lp <= 0 for lp in remote.logprobs)
    models = json.loads(urllib.request.urlopen(server + "/v1/models", timeout=10).read())
    assert models["data"][0]["id"] == "smollm2-135m"
    chat = _post(server + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert chat["choices"][0]["message"]["role"] == "assistant"


def test_the_agent_runs_through_the_endpoint(server, smol, small_browser):
    _, tok = smol
    policy = EndpointPolicy(server, "smollm2-135m", tok)
    traj = ResearchAgent(policy, small_browser.fork(), AgentConfig(max_turns=2, max_new_tokens=16)).run(
        "What is the capital of France?")
    assert 1 <= traj.turns <= 2
    traj.check_consistency()


def test_malformed_requests_get_a_4xx_with_a_message(server):
    for payload in ({}, {"prompt": 5}, {"prompt": "x", "max_tokens": -1}, {"prompt": "x", "stop": 3}):
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(server + "/v1/completions", payload)
        assert e.value.code == 400 and json.loads(e.value.read())["error"]["message"]


class _VLLMStyle(http.server.BaseHTTPRequestHandler):
    """Test double for a vLLM server (none can run here): it drops stop strings from the text, as
    vLLM does, and names the one that fired in ``stop_reason`` (None for EOS)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        choices = [
            {"index": 0, "text": "The error is:", "finish_reason": "stop", "stop_reason": "\n```\n"},
            {"index": 1, "text": "<search>pandas merge", "finish_reason": "stop", "stop_reason": None},
            {"index": 2, "text": "<search>pandas merge", "finish_reason": "stop"},
        ]
        body = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_stop_string_the_server_dropped_is_put_back(smol):
    _, tok = smol
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VLLMStyle)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        policy = EndpointPolicy(f"http://127.0.0.1:{srv.server_address[1]}", "m", tok)
        named, eos, unnamed = policy.generate([[1], [1], [1]], max_new_tokens=8, stop=["</search>", "\n```\n"])
    finally:
        srv.shutdown()
    # the fence came back, so the code agent can tell a bare ``` line (continue the turn) from an action
    assert named.text == "The error is:\n```\n" and named.finish_reason == "stop"
    assert tok.decode(named.token_ids) == named.text and len(named.logprobs) == len(named.token_ids)
    assert eos.text == "<search>pandas merge" and eos.finish_reason == "eos"  # vLLM: None means EOS
    assert unnamed.text == "<search>pandas merge</search>"  # no stop_reason: the open action's closer


def test_unreachable_endpoint_is_a_clear_error(smol):
    _, tok = smol
    policy = EndpointPolicy("http://127.0.0.1:9", "m", tok, timeout_s=1, retries=1)
    with pytest.raises(PolicyError, match="unreachable"):
        policy.generate([[1, 2, 3]], max_new_tokens=2)


def test_the_prefix_cache_budget_is_configurable_and_zero_turns_it_off(capsys):
    from research_agent.policy import load_policy
    from research_agent.serve import main

    assert load_policy("smollm2-135m", progress=False, cache_mb=16).cache.max_bytes == 16 << 20
    assert load_policy("smollm2-135m", progress=False, cache_mb=0).cache is None
    with pytest.raises(SystemExit):
        main(["--model", "smollm2-135m", "--prefix-cache-mb", "-1"])
    assert "--prefix-cache-mb must be >= 0" in capsys.readouterr().err
