"""The update's layout (shared prefixes, padding-light chunks) changes its cost, never its result."""

from __future__ import annotations

import itertools

import pytest
import torch

from research_agent.configs import build
from research_agent.train.batching import chunk_lengths, plan_cost, plan_update
from research_agent.train.config import TrainConfig
from research_agent.train.rl import policy_update, setup_lora
from research_agent.trajectory import Trajectory


def _cost(chunks, lengths, pass_cost):
    return sum(pass_cost + len(c) * max(lengths[i] for i in c) for c in chunks)


def _brute_force(lengths, max_rows, pass_cost):
    """Every way to split the sorted order into contiguous runs (the DP's search space)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    best = None
    for cuts in itertools.product([0, 1], repeat=len(order) - 1):
        chunks, cur = [], [order[0]]
        for i, cut in zip(order[1:], cuts, strict=True):
            if cut:
                chunks.append(cur)
                cur = []
            cur.append(i)
        chunks.append(cur)
        if all(len(c) <= max_rows for c in chunks):
            cost = _cost(chunks, lengths, pass_cost)
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("lengths,max_rows", [([65, 10, 9, 9, 12, 10, 11, 9], 8), ([5, 50, 48, 7, 6, 49], 3),
                                               ([30, 30, 30, 30], 2), ([100], 4), ([3, 90, 4, 88, 5, 2, 91], 7)])
def test_chunks_cover_every_row_once_and_are_the_cheapest(lengths, max_rows):
    chunks = chunk_lengths(lengths, max_rows, pass_cost=32)
    assert sorted(i for c in chunks for i in c) == list(range(len(lengths)))
    assert all(1 <= len(c) <= max_rows for c in chunks)
    assert _cost(chunks, lengths, 32) == _brute_force(lengths, max_rows, 32)


def test_a_long_straggler_gets_its_own_chunk():
    chunks = chunk_lengths([12, 64, 10, 9, 11, 10, 9, 10], 8, pass_cost=32)
    assert chunks[0] == [1] and len(chunks) == 2
    # when a pass costs more than the padding it saves, everything stays in one chunk
    assert len(chunk_lengths([12, 64, 10, 9, 11, 10, 9, 10], 8, pass_cost=10_000)) == 1


def test_plan_shares_each_leading_context_once_and_stops_before_the_first_model_token():
    a, b = list(range(100, 140)), list(range(200, 230))
    units = [(a + [1, 2, 3], [0] * 40 + [1] * 3), (a + [4, 5], [0] * 40 + [1] * 2),
             (b + [6] * 9, [0] * 30 + [1] * 9), (a + [7], [0] * 40 + [1]), ([8, 9, 10], [1, 1, 1])]
    plan = plan_update(units, micro_batch=8)
    shared = [blk for blk in plan if not blk.plain]
    assert len(shared) == 1 and sorted(map(tuple, shared[0].prefixes)) == sorted([tuple(a[:-1]), tuple(b[:-1])])
    rows = shared[0].row
    assert rows[0] == rows[1] == rows[3] != rows[2]
    # a sequence starting with model tokens has nothing to share: it runs plain
    assert [blk.row for blk in plan if blk.plain] == [{4: 0}]
    # micro_batch bounds the prefix rows of one pass and the rows of every chunk
    plan1 = plan_update(units, micro_batch=1)
    assert all(len(blk.prefixes) == 1 and all(len(c) == 1 for c in blk.chunks) for blk in plan1)
    assert not any(blk.prefixes[0] for blk in plan_update(units, micro_batch=8, share_prefix=False))


def test_plan_cost_counts_padded_positions_and_passes():
    a = list(range(100, 120))
    units = [(a + [1] * 30, [0] * 20 + [1] * 30), (a + [2] * 5, [0] * 20 + [1] * 5), (a + [3] * 4, [0] * 20 + [1] * 4)]
    shared = plan_update(units, micro_batch=4)
    assert [blk.chunks for blk in shared] == [[[0], [1, 2]]]
    # one prefix pass of 19 tokens; suffixes of 31 and 6/5 tokens (each starts at the prompt's last token)
    assert plan_cost(shared, units) == (3, 19 + 31 + 2 * 6)
    plain = plan_update(units, micro_batch=4, share_prefix=False, pass_cost=1e9)
    assert plan_cost(plain, units) == (1, 3 * 50)


def _trajectories(tok, two_steps: bool):
    """Three prompts of different lengths (so prefix rows are left-padded), completions from 2 to 64
    tokens (a straggler), random token ids so every position matters; with ``two_steps`` each
    trajectory is a turn, a 3-token observation (masked) and a second turn (GiGPO's per-step case)."""
    from research_agent.trajectory import Step

    gen = torch.Generator().manual_seed(0)
    out = []
    for q, lens in [("What is the capital of France? Answer with one word.", (3, 9, 64, 12)),
                    ("What is the capital of Italy, the country in southern Europe? One word.", (5, 9, 8)),
                    ("Name a prime.", (2,))]:
        pi = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        pi = list(pi["input_ids"] if hasattr(pi, "input_ids") else pi)
        for n in lens:
            first = torch.randint(100, 5000, (n,), generator=gen).tolist()
            t = Trajectory(question=q, gold={"answers": ["x"]}, prompt_ids=pi, token_ids=list(first),
                           token_mask=[1] * n, logprobs=[0.0] * n, steps=[Step("search", completion_ids=first)])
            if two_steps:
                obs, second = [11, 12, 13], torch.randint(100, 5000, (4,), generator=gen).tolist()
                t.steps[0].observation_ids = obs
                t.steps.append(Step("answer", completion_ids=second))
                t.token_ids += obs + second
                t.token_mask += [0] * 3 + [1] * 4
                t.logprobs += [0.0] * 7
            out.append(t)
    return out


# per-step (GiGPO) advantages run the per-trajectory case's code and more; that one is slow-only
@pytest.mark.model
@pytest.mark.parametrize("per_step", [pytest.param(False, id="per-trajectory", marks=pytest.mark.slow),
                                      pytest.param(True, id="per-step")])
def test_shared_prefix_update_equals_the_plain_padded_update(per_step):
    cfg = TrainConfig(lr=1.0, kl_coef=0.05, lora={"dropout": 0.0}, max_grad_norm=1e9)
    model, tok = setup_lora(cfg, progress=False)
    with torch.no_grad():  # a non-zero adapter, so the KL reference (adapter off) differs from the policy
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    trajs = _trajectories(tok, per_step)
    adv = torch.linspace(-1, 1, len(trajs)).tolist()
    if per_step:
        adv = [[a, 0.5 - a] for a in adv]
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    model.train()
    deltas, stats = {}, {}
    plain = {"share_prefix": False, "pass_cost": 1e9}  # whole sequences, fewest micro-batches
    for share, micro in [(False, 16), (True, 16), (True, 2)]:
        with torch.no_grad():
            for p, s0 in zip(params, start, strict=True):
                p.copy_(s0)
        opt = torch.optim.SGD(params, lr=cfg.lr)
        c = build(TrainConfig, {"share_prefix": share, "micro_batch": micro}, base=cfg)
        stats[share, micro] = policy_update(model, opt, params, trajs, adv, list(range(len(trajs))), c,
                                            tok.pad_token_id, layout=None if share else plain)
        deltas[share, micro] = torch.cat([(p.detach() - s0).flatten() for p, s0 in zip(params, start, strict=True)])
    ref = deltas[False, 16]
    assert ref.abs().max() > 1e-3
    for key in [(True, 16), (True, 2)]:
        assert torch.allclose(deltas[key], ref, rtol=1e-3, atol=1e-5), (key, float((deltas[key] - ref).abs().max()))
        assert stats[key]["tokens"] == stats[False, 16]["tokens"] == sum(sum(t.token_mask) for t in trajs)
        assert stats[key]["loss"] == pytest.approx(stats[False, 16]["loss"], rel=1e-4, abs=1e-6)
        assert stats[key]["kl"] == pytest.approx(stats[False, 16]["kl"], rel=1e-3)
        assert stats[key]["kl"] > 0


@pytest.mark.model
def test_gradient_checkpointing_recomputes_layers_and_gives_the_same_update():
    """Checkpointing trades compute for memory: each decoder layer runs again in the backward, and
    the update equals the default one (which shares prefixes through a K/V cache)."""
    deltas, calls = {}, {}
    for gc in (False, True):
        torch.manual_seed(0)  # the same LoRA init on both sides
        cfg = TrainConfig(lr=1.0, kl_coef=0.05, lora={"dropout": 0.0}, max_grad_norm=1e9,
                          compute={"micro_batch": 16, "gradient_checkpointing": gc})
        model, tok = setup_lora(cfg, progress=False)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
        trajs = _trajectories(tok, False)
        adv = torch.linspace(-1, 1, len(trajs)).tolist()
        params = [p for p in model.parameters() if p.requires_grad]
        start = [p.detach().clone() for p in params]
        count, mlp = [0], model.base_model.model.model.layers[3].mlp  # calls of one layer's MLP (forward
        inner = mlp.forward  # hooks do not fire in the backward's replay; the forward itself runs)

        def counted(*a, _inner=inner, _count=count, **k):
            _count[0] += 1
            return _inner(*a, **k)
        mlp.forward = counted
        model.train()
        policy_update(model, torch.optim.SGD(params, lr=cfg.lr), params, trajs, adv, list(range(len(trajs))), cfg,
                      tok.pad_token_id)
        deltas[gc] = torch.cat([(p.detach() - s0).flatten() for p, s0 in zip(params, start, strict=True)])
        units = [u for t in trajs for u in t.sequences()]
        calls[gc] = count[0], sum(len(b.chunks) for b in plan_update(units, 16, share_prefix=not gc))
    assert deltas[False].abs().max() > 1e-3
    assert torch.allclose(deltas[True], deltas[False], rtol=1e-3, atol=1e-5), float((deltas[True] - deltas[False]).abs().max())
    # default: a prefix pass and its reference, then each suffix chunk and its reference; checkpointed:
    # whole sequences, each chunk's policy pass, its reference, and the policy pass again in the backward
    (shared, chunks), (ckpt, plain_chunks) = calls[False], calls[True]
    assert shared == 2 + 2 * chunks and ckpt == 3 * plain_chunks, calls


def test_checkpointing_turns_on_by_itself_where_activations_would_pass_the_budget(smol):
    """Unset, each pass decides from its tokens and the model's size: the recipe's SFT micro-batch (4
    demonstrations of ~850 tokens, ~5 GB of activations on smollm2) recomputes, a short RL batch (8 rows
    of ~100 tokens) keeps them; a setting overrides either way."""
    from research_agent.train.rl import set_checkpointing, wants_checkpointing

    model, _ = smol
    auto = TrainConfig()
    assert wants_checkpointing(auto, model, 4 * 850)
    assert not wants_checkpointing(auto, model, 8 * 100)
    assert not wants_checkpointing(TrainConfig(compute={"gradient_checkpointing": False}), model, 4 * 850)
    assert wants_checkpointing(TrainConfig(compute={"gradient_checkpointing": True}), model, 8)
    # a machine with memory to spare raises the budget: the same SFT pass keeps its activations
    assert not wants_checkpointing(TrainConfig(compute={"activation_budget": 8.0}), model, 4 * 850)
    assert wants_checkpointing(TrainConfig(compute={"activation_budget": 0.01}), model, 8 * 100)
    assert wants_checkpointing(auto, None, 10**6) is False  # nothing to estimate from
    try:
        set_checkpointing(model, True)
        assert model.is_activation_checkpointing
        set_checkpointing(model, True)  # idempotent
        assert model.is_activation_checkpointing
    finally:
        set_checkpointing(model, False)
    assert not model.is_activation_checkpointing
