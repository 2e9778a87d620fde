"""Prefix KV caching must not change what the policy generates, only how much it prefills."""

import pytest
import torch

from research_agent.inference.policy import LocalPolicy
from research_agent.inference.prefix_cache import PrefixCache

STOP = ["</search>", "</answer>"]


@pytest.fixture(scope="module")
def smol():
    from research_agent.inference.models import load_model

    return load_model("smollm2-135m", progress=False)


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


def test_cached_turns_match_plain_generate(smol):
    model, tok = smol
    plain = LocalPolicy(model, tok, prefix_cache=False)
    cached = LocalPolicy(model, tok)
    prompts = _prompts(tok, ["What is the capital of France?", "Which country borders Spain and Morocco?",
                             "What is the population of Kenya?"])
    first_a = plain.generate(prompts, max_new_tokens=20, stop=STOP)
    first_b = cached.generate(prompts, max_new_tokens=20, stop=STOP)
    _same(first_a, first_b)
    # the system prompt is shared: computed once, not three times
    assert cached.cache.hit_tokens > 0
    # second turn: each row continues its own transcript with observations of different lengths,
    # and a brand-new trajectory joins the batch (its short prompt is padded, never mid-row)
    obs = tok.encode("\n<result>[factbook/fr#0] France ... capital: Paris</result>\n", add_special_tokens=False)
    turn2 = [p + g.token_ids + obs * (i + 1) for i, (p, g) in enumerate(zip(prompts, first_a, strict=True))]
    turn2 += _prompts(tok, ["Capital of Peru?"])
    hit_before = cached.cache.hit_tokens
    _same(plain.generate(turn2, max_new_tokens=20, stop=STOP), cached.generate(turn2, max_new_tokens=20, stop=STOP))
    # the continuing rows reused at least their previous prompts
    assert cached.cache.hit_tokens - hit_before >= sum(len(p) for p in prompts)


def test_group_of_identical_prompts_is_prefilled_once(smol):
    model, tok = smol
    plain = LocalPolicy(model, tok, prefix_cache=False)
    cached = LocalPolicy(model, tok)
    a, b = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?"])
    group = [a, a, b, a, b]  # GRPO's G samples per prompt, interleaved
    _same(plain.generate(group, max_new_tokens=10, stop=STOP), cached.generate(group, max_new_tokens=10, stop=STOP))
    # on a fresh store the group feeds the model exactly what the two distinct prompts alone feed
    fresh, pair = LocalPolicy(model, tok), LocalPolicy(model, tok)
    fresh.generate(group, max_new_tokens=2)
    pair.generate([a, b], max_new_tokens=2)
    assert fresh.cache.fed_tokens == pair.cache.fed_tokens
    assert fresh.cache.hit_tokens == pair.cache.hit_tokens + 2 * len(a) + len(b)
    # copies of a row's prefill still sample independently
    torch.manual_seed(0)
    outs = fresh.generate([b] * 6, max_new_tokens=12, temperature=1.0)
    assert len({tuple(g.token_ids) for g in outs}) > 1
    # duplicates whose context is partly cached (a second turn of two equal trajectories)
    turn2 = [p + [13, 13] for p in (a, a, b)]
    _same(plain.generate(turn2, max_new_tokens=10, stop=STOP), cached.generate(turn2, max_new_tokens=10, stop=STOP))


def test_prompts_admitted_mid_decode_generate_what_they_would_alone(smol):
    """Continuous batching: rows joining a running batch (its cache wider or narrower than theirs,
    some of their context cached) get the tokens and log-probs they get on their own, and every
    row is reported the moment it finishes."""
    model, tok = smol
    plain = LocalPolicy(model, tok, prefix_cache=False)
    cached = LocalPolicy(model, tok)
    a, b, c, d = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?",
                                "Name the largest desert in Africa and the countries it spans.", "Capital of Peru?"])
    first = cached.generate([a], max_new_tokens=6, stop=STOP)[0]
    c2 = a + first.token_ids + [13, 13]  # a second turn: its prefix is in the store
    schedule = {2: [c], 5: [d, c2]}  # decode step -> prompts arriving then
    steps, reported = [0], []

    def admit(active):
        steps[0] += 1
        assert active >= 0
        return schedule.pop(steps[0], [])

    def on_done(index, gen):
        reported.append((index, steps[0], gen))

    outs = cached.generate_continuous([a, b], admit=admit, on_done=on_done, max_new_tokens=14, stop=STOP)
    assert not schedule  # every arrival was taken in
    alone = [plain.generate([p], max_new_tokens=14, stop=STOP)[0] for p in (a, b, c, d, c2)]
    _same(outs, alone)
    assert sorted(i for i, _, _ in reported) == [0, 1, 2, 3, 4]
    for index, _, gen in reported:
        assert gen.token_ids == outs[index].token_ids
    # the first rows were reported before the late ones had finished
    when = {i: step for i, step, _ in reported}
    assert min(when[0], when[1]) < max(when[3], when[4])
    with pytest.raises(ValueError, match="prefix-cache"):
        plain.generate_continuous([a], admit=admit, on_done=on_done)


def test_batching_policy_takes_late_requests_into_the_running_call(smol):
    import threading
    import time

    from research_agent.inference.policy import BatchingPolicy

    model, tok = smol
    local = LocalPolicy(model, tok)
    local.eos_ids = set()  # every row decodes all 40 tokens: the first call outlasts the arrivals
    policy = BatchingPolicy(local, max_batch=8, wait_s=0.05)
    prompts = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?", "Capital of Peru?"])
    out: dict = {}

    def ask(pol, i):
        out[i] = pol.generate([prompts[i]], max_new_tokens=40)[0]

    threads = []
    for i in range(3):  # staggered: each arrives after the previous call has started decoding
        threads.append(threading.Thread(target=ask, args=(policy, i)))
        threads[-1].start()
        time.sleep(0.4)
    for t in threads:
        t.join()
    assert policy.calls == 1  # one running batch took in the late arrivals
    alone = LocalPolicy(model, tok)  # (the cached loop itself is checked against plain generate above)
    alone.eos_ids = set()
    _same([out[i] for i in range(3)], [alone.generate([p], max_new_tokens=40)[0] for p in prompts])
    # a full batch: the late request waits for room and then joins the same call
    one = BatchingPolicy(local, max_batch=1, wait_s=0.05)
    out.clear()
    threads = [threading.Thread(target=ask, args=(one, i)) for i in range(2)]
    threads[0].start()
    time.sleep(0.4)
    threads[1].start()
    for t in threads:
        t.join()
    assert one.calls == 1
    _same([out[0], out[1]], [alone.generate([p], max_new_tokens=40)[0] for p in prompts[:2]])


def test_weight_update_drops_the_cache(smol):
    model, tok = smol
    cached = LocalPolicy(model, tok)
    prompts = _prompts(tok, ["What is the capital of Chile?", "What is the capital of Japan?"])
    cached.generate(prompts, max_new_tokens=8)
    assert len(cached.cache) > 0
    w = model.get_output_embeddings().weight if model.get_output_embeddings() is not None else None
    param = next(p for p in model.parameters() if p is not w)
    with torch.no_grad():
        param.mul_(1.0)  # an in-place update, like an optimizer step (values unchanged, version moves)
    hit = cached.cache.hit_tokens
    cached.generate(prompts[:1], max_new_tokens=4)
    assert cached.cache.hit_tokens == hit  # nothing stale was reused


def test_lora_model_matches_plain(smol):
    from peft import LoraConfig, get_peft_model

    model, tok = smol
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            lora_dropout=0.0, init_lora_weights=False))
    try:
        prompts = _prompts(tok, ["What is the area of Chad?", "Who borders Niger?"])
        plain = LocalPolicy(lora, tok, prefix_cache=False)
        cached = LocalPolicy(lora, tok)
        _same(plain.generate(prompts, max_new_tokens=12, stop=STOP), cached.generate(prompts, max_new_tokens=12, stop=STOP))
        turn2 = [p + g.token_ids + [13, 13] for p, g in zip(prompts, plain.generate(prompts, max_new_tokens=12), strict=True)]
        _same(plain.generate(turn2, max_new_tokens=12, stop=STOP), cached.generate(turn2, max_new_tokens=12, stop=STOP))
    finally:
        lora.unload()


def _layers(n, heads=2, dim=4):
    return [(torch.randn(heads, n, dim), torch.randn(heads, n, dim)) for _ in range(3)]


def test_store_longest_prefix_supersede_and_budget():
    store = PrefixCache(max_bytes=10**9, min_prefix=2)
    store.put([1, 2, 3, 4], _layers(4))
    store.put([1, 2, 9], _layers(3))
    n, entry = store.lookup([1, 2, 3, 4, 5, 6])
    assert n == 4 and list(entry.ids) == [1, 2, 3, 4]
    n, entry = store.lookup([1, 2, 9, 7])
    assert n == 3
    # an exact repeat keeps one token to feed
    n, _ = store.lookup([1, 2, 3, 4])
    assert n == 3
    assert store.lookup([5, 6, 7]) == (0, None)
    # a continuation replaces the entry it extends
    store.put([1, 2, 3, 4, 5, 6], _layers(6))
    assert len(store) == 2
    # the byte budget evicts least recently used entries
    one = sum(k.nbytes + v.nbytes for k, v in _layers(6))
    small = PrefixCache(max_bytes=int(one * 1.5), min_prefix=1)
    small.put([1, 2, 3, 4, 5, 6], _layers(6))
    small.put([7, 8, 9, 10, 11, 12], _layers(6))
    assert len(small) == 1 and small.lookup([7, 8, 9, 10, 11, 12, 13])[0] == 6
    assert small.nbytes <= small.max_bytes


def test_loop_detection_needs_four_repeats_over_48_tokens():
    from research_agent.inference.policy import cut_at_loop, ends_in_loop

    block = list(range(100, 112))  # 12 tokens
    assert ends_in_loop(list(range(7)) + block * 4)
    assert not ends_in_loop(list(range(7)) + block * 3)  # three repeats of a 12-token line: real code does that
    assert not ends_in_loop(list(range(500)))
    assert ends_in_loop([5] * 48) and not ends_in_loop([5] * 47)
    assert not ends_in_loop([1, 2] * 23 + [1])  # 47 tokens
    # a block of 20 needs 4 whole repeats (80 tokens), not just 48
    assert not ends_in_loop(list(range(200, 220)) * 3 + list(range(200, 208)))
    ids = [9, 8] + block * 6 + [1, 2, 3]
    cut, looped = cut_at_loop(ids)
    assert looped and cut == [9, 8] + block * 4
    assert cut_at_loop(list(range(300))) == (list(range(300)), False)


def test_stop_loops_ends_a_looping_row_early_and_the_same_on_both_paths(smol, monkeypatch):
    from research_agent.inference import decode_step

    model, tok = smol
    line = tok.encode("from sklearn.metrics import roc_curve\n", add_special_tokens=False)
    prompts = [tok.encode("Imports:\n", add_special_tokens=False) + line * 6]
    calls = [0]
    hook = model.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    lean = decode_step.decode_step

    def counted(*args, **kwargs):  # a decode step that does not go through model(...)
        calls[0] += 1
        return lean(*args, **kwargs)

    monkeypatch.setattr(decode_step, "decode_step", counted)
    try:
        free = LocalPolicy(model, tok).generate(prompts, max_new_tokens=96)[0]
        free_calls, calls[0] = calls[0], 0
        cached = LocalPolicy(model, tok).generate(prompts, max_new_tokens=96, stop_loops=True)
        cached_calls = calls[0]
    finally:
        hook.remove()
    plain = LocalPolicy(model, tok, prefix_cache=False).generate(prompts, max_new_tokens=96, stop_loops=True)
    _same(cached, plain)
    # the model keeps repeating the line: cut once it has written 48 tokens of repeats, not at 96
    assert free.finish_reason == "length" and len(free.token_ids) == 96
    assert cached[0].finish_reason == "loop" and 48 <= len(cached[0].token_ids) < 96
    assert free.token_ids[: len(cached[0].token_ids)] == cached[0].token_ids  # a prefix: nothing else changes
    # generation itself stopped there (fewer decode steps), not just the returned text
    assert cached_calls == free_calls - (96 - len(cached[0].token_ids))


def test_growing_cache_appends_in_place_and_reallocates_when_rows_leave():
    from research_agent.inference.prefix_cache import _append

    g = torch.Generator().manual_seed(0)
    cur = torch.randn(3, 2, 10, 4, generator=g)
    expect, buf = cur, None
    ptrs = set()
    for _ in range(20):
        new = torch.randn(3, 2, 1, 4, generator=g)
        cur, buf = _append(cur, buf, new)
        expect = torch.cat([expect, new], dim=-2)
        assert torch.equal(cur, expect)
        ptrs.add(buf.data_ptr())
    assert len(ptrs) <= 2  # 10 + 20 positions: one buffer with 25 % room (or 64) and at most one regrowth
    kept = cur.index_select(0, torch.tensor([0, 2]))  # rows left the batch: a new, smaller tensor
    new = torch.randn(2, 2, 1, 4, generator=g)
    cur2, buf2 = _append(kept, buf, new)
    assert buf2.data_ptr() != buf.data_ptr() and torch.equal(cur2, torch.cat([expect[[0, 2]], new], dim=-2))


def test_a_seeded_sample_is_the_same_alone_in_a_batch_and_admitted_late(smol):
    """A seeded row's sampled tokens depend on its seed, not on what shares its batch or on the global
    generator: the eval's redrawn turns repeat when the run is repeated."""
    model, tok = smol
    a, b, c = _prompts(tok, ["What is the capital of Chile?", "Which ocean borders Kenya?", "Capital of Peru?"])
    torch.manual_seed(0)
    alone = LocalPolicy(model, tok).generate([a], max_new_tokens=16, temperature=1.0, seeds=[7])[0]
    torch.manual_seed(1)  # the global generator moved: a seeded row does not read it
    batch = LocalPolicy(model, tok).generate([b, a, c], max_new_tokens=16, temperature=1.0, seeds=[None, 7, 8])
    assert batch[1].token_ids == alone.token_ids
    steps = [0]

    def admit(active):
        steps[0] += 1
        return [a] if steps[0] == 3 else []

    late = LocalPolicy(model, tok).generate_continuous([b, c], admit=admit, on_done=lambda i, g: None,
                                                       max_new_tokens=16, temperature=1.0,
                                                       seeds=lambda i: (None, 8, 7)[i])
    assert late[2].token_ids == alone.token_ids and late[1].token_ids == batch[2].token_ids
    # other seeds are other samples; the unseeded rows still sample from the global generator
    others = {tuple(LocalPolicy(model, tok).generate([a], max_new_tokens=16, temperature=1.0, seeds=[s])[0].token_ids)
              for s in range(1, 6)}
    assert len(others) > 1
    # plain generate (the reference path) repeats itself too, one seeded row at a time
    plain = LocalPolicy(model, tok, prefix_cache=False)
    x = plain.generate([a, b], max_new_tokens=12, temperature=1.0, seeds=[7, None])[0]
    assert plain.generate([a], max_new_tokens=12, temperature=1.0, seeds=[7])[0].token_ids == x.token_ids


def test_seeded_uniforms_are_uniform_and_a_function_of_seed_and_position():
    from research_agent.inference.prefix_cache import seeded_uniform

    draws = [seeded_uniform(3, k) for k in range(20_000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.01
    assert sum(u < 0.1 for u in draws) / len(draws) == pytest.approx(0.1, abs=0.01)
    assert seeded_uniform(3, 5) == seeded_uniform(3, 5) != seeded_uniform(4, 5)
    assert len({seeded_uniform(s, 0) for s in range(1000)}) == 1000  # neighbouring seeds do not collide
