"""Generation in token space with runtime LoRA adapters: what a trainer needs from a generation server."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest

from research_agent.inference.adapters import load_adapter
from research_agent.inference.policy import EndpointPolicy, LocalPolicy, PolicyError
from tests.loras import random_lora


@pytest.fixture(scope="module")
def lora_dir(smol, tmp_path_factory):
    return random_lora(smol[0], tmp_path_factory.mktemp("lora") / "adapter", seed=0)


def post(url, payload):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_token_space_generation_returns_exactly_the_local_tokens(server, smol):
    model, tok = smol
    prompt = tok.encode("The capital of France is")
    local = LocalPolicy(model, tok).generate([prompt], max_new_tokens=12, stop=["."])[0]
    remote = EndpointPolicy(server, "smollm2-135m", tok, token_ids=True).generate(
        [prompt], max_new_tokens=12, stop=["."])[0]
    assert remote.token_ids == local.token_ids and remote.finish_reason == local.finish_reason
    assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)
    status, body = post(server + "/v1/completions", {"prompt": prompt, "max_tokens": 3,
                                                     "return_tokens_as_token_ids": True})
    assert status == 200 and all(t.startswith("token_id:") for t in body["choices"][0]["logprobs"]["tokens"])


def test_a_loaded_adapter_serves_its_own_model_and_an_unloaded_one_is_refused(server, smol, lora_dir):
    model, tok = smol
    prompt = tok.encode("Write one word about the sea:")
    with_lora = LocalPolicy(load_adapter(copy.deepcopy(model), lora_dir), tok)
    want = with_lora.generate([prompt], max_new_tokens=10)[0]
    base = LocalPolicy(model, tok).generate([prompt], max_new_tokens=10)[0]
    assert want.token_ids != base.token_ids, "the adapter must change the output, or this test proves nothing"

    status, body = post(server + "/v1/load_lora_adapter", {"lora_name": "step-1", "lora_path": str(lora_dir)})
    assert status == 200, body
    ids = [m["id"] for m in json.loads(urllib.request.urlopen(server + "/v1/models", timeout=10).read())["data"]]
    assert ids == ["smollm2-135m", "step-1"]
    client = EndpointPolicy(server, "step-1", tok, token_ids=True)
    got = client.generate([prompt], max_new_tokens=10)[0]
    assert got.token_ids == want.token_ids and got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    client.model_name = "smollm2-135m"  # the base is still served unchanged beside it
    assert client.generate([prompt], max_new_tokens=10)[0].token_ids == base.token_ids

    assert post(server + "/v1/load_lora_adapter", {"lora_name": "step-1", "lora_path": str(lora_dir)})[0] == 400
    status, body = post(server + "/v1/load_lora_adapter", {"lora_name": "bad", "lora_path": str(lora_dir.parent)})
    assert status == 400 and "cannot load the adapter" in body["error"]["message"]
    assert post(server + "/v1/unload_lora_adapter", {"lora_name": "step-1"})[0] == 200
    client.model_name = "step-1"
    with pytest.raises(PolicyError, match="404.*was unloaded"):
        client.generate([prompt], max_new_tokens=4)
    assert post(server + "/v1/unload_lora_adapter", {"lora_name": "step-1"})[0] == 400
