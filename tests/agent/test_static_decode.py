"""The static decode path (``inference.static_decode``, the GPU rollouts' decode) gives the tokens of
the plain path: checked here on the CPU with graphs off, on the real fast model, greedy, through the
same cases the prefix-cache loop is checked with (later turns, groups, rows admitted mid-decode,
stop strings read every few steps, seeded draws, a live LoRA adapter updated in place)."""

import threading
import time

import pytest
import torch

from research_agent.inference import static_decode
from research_agent.inference.policy import BatchingPolicy, LocalPolicy

STOP = ["</search>", "</answer>"]
LORA_SEED = 7  # the shared lora_model fixture (tests/agent/conftest.py) with this seed


@pytest.fixture(scope="module")
def smol():
    from research_agent.inference.models import load_model

    return load_model("smollm2-135m", progress=False)


def _static(model, tok, **kw):
    kw.setdefault("sync_every", 4)
    return LocalPolicy(model, tok, decode="static", graphs=False, **kw)


def _prompts(tok, questions):
    rules = "You research questions. Search with <search>query</search>, answer with <answer>text</answer>. " * 4
    out = []
    for q in questions:
        ids = tok.apply_chat_template([{"role": "system", "content": rules}, {"role": "user", "content": q}],
                                      add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if hasattr(ids, "input_ids") else ids))
    return out


def _same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    for x, y in zip(a, b, strict=True):
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-3)


def test_turns_and_groups_match_plain_generate(smol):
    model, tok = smol
    plain = LocalPolicy(model, tok, prefix_cache=False)
    static = _static(model, tok)
    assert static.static_decoder() is not None
    prompts = _prompts(tok, ["What is the capital of France?", "Which country borders Spain and Morocco?",
                             "What is the population of Kenya?"])
    first = plain.generate(prompts, max_new_tokens=20, stop=STOP)
    _same(first, static.generate(prompts, max_new_tokens=20, stop=STOP))
    assert static.cache.hit_tokens > 0  # the shared system prompt was computed once
    # a second turn continues each row's transcript (cached prefix) and a new row joins
    obs = tok.encode("\n<result>[factbook/fr#0] France ... capital: Paris</result>\n", add_special_tokens=False)
    turn2 = [p + g.token_ids + obs * (i + 1) for i, (p, g) in enumerate(zip(prompts, first, strict=True))]
    turn2 += _prompts(tok, ["Capital of Peru?"])
    hit = static.cache.hit_tokens
    _same(plain.generate(turn2, max_new_tokens=20, stop=STOP), static.generate(turn2, max_new_tokens=20, stop=STOP))
    assert static.cache.hit_tokens - hit >= sum(len(p) for p in prompts)
    # a GRPO group (identical prompts interleaved), more rows than the slots had: the slots grow
    a, b = prompts[0], prompts[1]
    group = [a, a, b, a, b, a, b, b, a]
    _same(plain.generate(group, max_new_tokens=10, stop=STOP), static.generate(group, max_new_tokens=10, stop=STOP))
    dec = static.static_decoder()
    assert dec._slots.rows >= len(group) and dec.captures == 0  # graphs off on the CPU


def test_reading_tokens_every_step_or_every_eight_gives_the_same(smol):
    model, tok = smol
    prompts = _prompts(tok, ["Name three rivers of Africa.", "Capital of Chile?"])
    one, eight = _static(model, tok, sync_every=1), _static(model, tok, sync_every=8)
    a = one.generate(prompts, max_new_tokens=24, stop=STOP)
    b = eight.generate(prompts, max_new_tokens=24, stop=STOP)
    _same(a, b)
    assert eight.static_decoder().syncs < one.static_decoder().syncs


def test_rows_admitted_mid_decode_generate_what_they_would_alone(smol):
    """Continuous batching: arrivals fill the slots of finished rows (the last rows move into the
    holes) and get the tokens they get alone; each row is reported when it finishes."""
    model, tok = smol
    plain = LocalPolicy(model, tok, prefix_cache=False)
    static = _static(model, tok, sync_every=2)
    a, b, c, d = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?",
                                "Name the largest desert in Africa and the countries it spans.", "Capital of Peru?"])
    first = static.generate([a], max_new_tokens=6, stop=STOP)[0]
    c2 = a + first.token_ids + [13, 13]  # a second turn: its prefix is in the store
    schedule = {2: [c], 4: [d, c2]}  # sync -> prompts arriving then
    syncs, reported = [0], []

    def admit(active):
        syncs[0] += 1
        return schedule.pop(syncs[0], [])

    def on_done(index, gen):
        reported.append((index, syncs[0], gen))

    outs = static.generate_continuous([a, b], admit=admit, on_done=on_done, max_new_tokens=14, stop=STOP)
    assert not schedule
    _same(outs, [plain.generate([p], max_new_tokens=14, stop=STOP)[0] for p in (a, b, c, d, c2)])
    assert sorted(i for i, _, _ in reported) == [0, 1, 2, 3, 4]
    for index, _, gen in reported:
        assert gen.token_ids == outs[index].token_ids


def test_seeded_draws_match_the_loop(smol):
    """A seeded sampled row draws from its seed and positions alone: the loop's tokens, in any batch."""
    model, tok = smol
    loop = LocalPolicy(model, tok, decode="loop")
    static = _static(model, tok)
    prompts = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?"])
    want = loop.generate(prompts, max_new_tokens=16, temperature=1.0, seeds=[11, 12])
    got = static.generate(prompts, max_new_tokens=16, temperature=1.0, seeds=[11, 12])
    _same(want, got)
    alone = static.generate(prompts[1:], max_new_tokens=16, temperature=1.0, seeds=[12])
    assert alone[0].token_ids == got[1].token_ids
    torch.manual_seed(0)  # unseeded rows sample from the global generator: different draws
    draws = static.generate([prompts[0]] * 4, max_new_tokens=12, temperature=1.0)
    assert len({tuple(g.token_ids) for g in draws}) > 1


def test_a_live_lora_adapter_updated_in_place(lora_model):
    """The LoRA layers are the model's own (no merged copy): after an in-place update, like an
    optimizer step, the next generation computes with the new weights, as plain generate does."""
    model, tok = lora_model
    plain = LocalPolicy(model, tok, prefix_cache=False)
    static = _static(model, tok)
    prompts = _prompts(tok, ["What is the area of Chad?", "Who borders Niger?"])
    _same(plain.generate(prompts, max_new_tokens=12, stop=STOP), static.generate(prompts, max_new_tokens=12, stop=STOP))
    key = static_decode.structure(model)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad():
            for p in lora_b:
                p.mul_(3.0)
        assert static_decode.structure(model) == key  # in place: a captured graph would stay valid
        _same(plain.generate(prompts, max_new_tokens=12, stop=STOP),
              static.generate(prompts, max_new_tokens=12, stop=STOP))
    finally:
        with torch.no_grad():
            for p, old in zip(lora_b, saved, strict=True):
                p.copy_(old)


def test_batching_policy_drives_it(smol):
    model, tok = smol
    local = _static(model, tok)
    local.eos_ids = set()  # every row decodes its whole budget: the first call outlasts the arrivals
    prompts = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?", "Capital of Peru?"])
    out: dict = {}
    with BatchingPolicy(local, max_batch=8, wait_s=0.05) as policy:
        def ask(i):
            out[i] = policy.generate([prompts[i]], max_new_tokens=30)[0]

        threads = []
        for i in range(3):
            threads.append(threading.Thread(target=ask, args=(i,)))
            threads[-1].start()
            time.sleep(0.3)
        for t in threads:
            t.join()
    alone = LocalPolicy(model, tok, prefix_cache=False)
    alone.eos_ids = set()
    _same([out[i] for i in range(3)], [alone.generate([p], max_new_tokens=30)[0] for p in prompts])


def test_the_cpu_default_stays_the_loop(smol, monkeypatch):
    model, tok = smol
    monkeypatch.delenv("RESEARCH_AGENT_DECODE", raising=False)
    assert LocalPolicy(model, tok).static_decoder() is None  # auto on the CPU: the loop it was measured with
    assert static_decode.supported(model)
    monkeypatch.setenv("RESEARCH_AGENT_DECODE", "static")
    assert LocalPolicy(model, tok).static_decoder() is not None
    assert LocalPolicy(model, tok, decode="loop").static_decoder() is None  # an explicit choice wins
    with pytest.raises(static_decode.StaticDecodeError, match="use one of"):
        LocalPolicy(model, tok, decode="fast")
    with pytest.raises(static_decode.StaticDecodeError, match="CUDA graphs"):
        LocalPolicy(model, tok, decode="static", graphs=True).generate([[1, 2, 3]], max_new_tokens=2)


def test_an_unsupported_model_is_refused_by_name():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32))
    assert not static_decode.supported(gpt2)
    assert not static_decode.wants_static(gpt2, "auto")
    with pytest.raises(static_decode.StaticDecodeError, match="decode loop"):
        static_decode.wants_static(gpt2, "static")
