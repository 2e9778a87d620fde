"""Advantages, filters and the masked loss, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from research_agent.train.algorithms import group_advantages, keep_groups
from research_agent.train.loss import policy_gradient_loss


def test_reinforce_uses_the_batch_mean():
    assert group_advantages([1.0, 0.0, 0.5, 0.5], 2, "reinforce") == pytest.approx([0.5, -0.5, 0.0, 0.0])


def test_grpo_normalizes_within_each_group():
    adv = group_advantages([1.0, 0.0, 0.5, 0.5], 2, "grpo")
    assert adv[:2] == pytest.approx([1.0, -1.0], abs=1e-5)  # mean .5, std .5
    assert adv[2:] == pytest.approx([0.0, 0.0])  # zero variance → zero advantage


def test_rloo_leaves_one_out():
    # group [1, 0, 0]: 1 − 0 = 1; 0 − (1+0)/2 = −0.5
    assert group_advantages([1.0, 0.0, 0.0], 3, "rloo") == pytest.approx([1.0, -0.5, -0.5])


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="NaN"):
        group_advantages([math.nan, 1.0], 2, "grpo")
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 0.0], 3, "grpo")
    with pytest.raises(ValueError, match="unknown algorithm"):
        group_advantages([1.0, 0.0], 2, "ppo-magic")


def test_dynamic_filter_drops_saturated_and_flat_groups():
    rewards = [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.3, 0.3, 0.3, 0.3]
    correct = [True] * 4 + [False] * 4 + [True, False, False, False] + [False] * 4
    assert keep_groups(rewards, correct, 4) == [False, False, True, False]
    # accuracy thresholds disabled: only the zero-variance rule remains
    assert keep_groups(rewards, correct, 4, low=0, high=1) == [False, False, True, False]
    assert keep_groups([1, 0, 1, 0], [True, False, True, False], 4, low=0, high=1) == [True]


def test_loss_ignores_observation_tokens():
    torch.manual_seed(0)
    logp = torch.randn(2, 6).clamp(max=0).requires_grad_()
    mask = torch.tensor([[0, 1, 1, 0, 0, 1], [0, 0, 1, 1, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5])
    ref = logp.detach() - 0.1
    loss, _ = policy_gradient_loss(logp, logp.detach(), ref, adv, mask, kl_coef=0.05)
    loss.backward()
    grad = logp.grad.clone()
    assert torch.all(grad[mask == 0] == 0)  # no gradient reaches observation positions
    # perturbing the observation positions' log-probs changes nothing
    logp2 = logp.detach().clone()
    logp2[mask == 0] += torch.randn(int((mask == 0).sum()))
    ref2 = ref.clone()
    ref2[mask == 0] = logp2[mask == 0] - 0.1
    loss3, _ = policy_gradient_loss(logp2, logp2, ref2, adv, mask, kl_coef=0.05)
    assert float(loss3.detach()) == pytest.approx(float(loss.detach()), abs=1e-6)


def test_clipped_ratio_bounds_the_update():
    logp = torch.tensor([[0.0, -0.1]])
    old = torch.tensor([[0.0, -1.0]])  # ratio e^0.9 ≈ 2.46 on the second token
    mask = torch.tensor([[0.0, 1.0]])
    adv = torch.tensor([1.0])
    unclipped, _ = policy_gradient_loss(logp, old, logp, adv, mask, kl_coef=0.0)
    clipped, _ = policy_gradient_loss(logp, old, logp, adv, mask, kl_coef=0.0, clip_ratio=0.2)
    assert float(unclipped) == pytest.approx(-math.exp(0.9), rel=1e-5)
    assert float(clipped) == pytest.approx(-1.2, rel=1e-5)


def test_masked_logprobs_match_the_full_projection_and_carry_gradients(smol):
    """The trainer's path projects onto the vocabulary only at model-token columns; its values
    (log-probs, entropy) must equal the full computation there and be 0 elsewhere."""
    from research_agent.train.loss import pad_batch, token_logprobs

    model, tok = smol
    a = tok.encode("Question: capital of France?\n<search>France</search>", add_special_tokens=False)
    b = tok.encode("Question: capital of Peru? <answer>Lima</answer>", add_special_tokens=False)
    ma = [0] * (len(a) - 4) + [1] * 4
    mb = [0] * 3 + [1] * 2 + [0] * (len(b) - 5)
    ids, attn, lmask = pad_batch([a, b], [ma, mb], tok.pad_token_id)
    with torch.no_grad():
        full, full_ent = token_logprobs(model, ids, attn, with_entropy=True)
        part, part_ent = token_logprobs(model, ids, attn, with_entropy=True, loss_mask=lmask)
    used = lmask.bool()
    assert torch.allclose(part[used], full[used], atol=1e-4)
    assert torch.allclose(part_ent[used], full_ent[used], atol=1e-3)
    keep = (lmask[:, 1:].sum(0) > 0)
    assert torch.all(part[:, 1:][:, ~keep] == 0) and torch.all(part[:, 0] == 0)
    emb = model.get_input_embeddings().weight
    emb.grad = None
    lp, _ = token_logprobs(model, ids, attn, loss_mask=lmask)
    (lp * lmask).sum().backward()
    assert emb.grad is not None and float(emb.grad.abs().sum()) > 0
    model.zero_grad(set_to_none=True)


def _traj(steps, prompt_len=3):
    """A full-context trajectory from (action, observation, completion length, observation length)."""
    from research_agent.trajectory import Step, Trajectory

    t = Trajectory(question="q", prompt_ids=list(range(prompt_len)))
    for action, obs, n_model, n_obs in steps:
        t.steps.append(Step(action=action, observation=obs, completion_ids=[7] * n_model,
                            completion_logprobs=[0.0] * n_model, observation_ids=[8] * n_obs))
        t.token_ids += [7] * n_model + [8] * n_obs
        t.token_mask += [1] * n_model + [0] * n_obs
        t.logprobs += [0.0] * (n_model + n_obs)
    return t


def test_gigpo_adds_step_advantages_within_anchor_states():
    from research_agent.train.algorithms import gigpo_advantages

    # one group of 3: A searches then answers right (reward 1); B makes the same search, gets the
    # same results, answers wrong (0); C answers at once, wrong (0)
    a = _traj([("search", "hits X", 2, 2), ("answer", "", 2, 0)])
    b = _traj([("search", "hits X", 2, 2), ("answer", "", 2, 0)])
    c = _traj([("answer", "", 2, 0)])
    adv = gigpo_advantages([a, b, c], [1.0, 0.0, 0.0], 3, gamma=0.5, omega=1.0)
    # episode (GRPO): mean 1/3, std sqrt(2)/3 → A +1.4142, B and C −0.7071
    ep_a, ep_bc = (1 - 1 / 3) / (math.sqrt(2) / 3), (0 - 1 / 3) / (math.sqrt(2) / 3)
    # first turns share the start state; returns 0.5·1, 0.5·0, 1·0 → mean 1/6, std sqrt(1/18)
    s = math.sqrt(1 / 18)
    first = [(0.5 - 1 / 6) / s, (0 - 1 / 6) / s, (0 - 1 / 6) / s]
    # A's and B's second turns start from the same results: returns 1 vs 0 → ±1
    assert adv[0] == pytest.approx([ep_a + first[0], ep_a + 1.0], abs=1e-4)
    assert adv[1] == pytest.approx([ep_bc + first[1], ep_bc - 1.0], abs=1e-4)
    assert adv[2] == pytest.approx([ep_bc + first[2]], abs=1e-4)
    # a state reached by one trajectory only gets no step term; flat returns neither
    d = _traj([("search", "other hits", 2, 2), ("answer", "", 2, 0)])
    adv = gigpo_advantages([a, d], [1.0, 1.0], 2)
    assert adv == [[0.0, 0.0], [0.0, 0.0]]


def test_gigpo_token_advantages_follow_the_steps_and_drive_the_loss():
    from research_agent.train.algorithms import sequence_advantages

    t = _traj([("search", "hits", 2, 3), ("answer", "", 1, 0)], prompt_len=2)
    [(ids, mask)] = t.sequences()
    [tok] = sequence_advantages(t, [0.5, -2.0])
    assert tok == [0, 0, 0.5, 0.5, 0, 0, 0, -2.0]
    assert [m for m in mask] == [int(a != 0) for a in tok]
    assert sequence_advantages(t, 0.25) == [0.25]
    with pytest.raises(ValueError, match="step advantages"):
        sequence_advantages(t, [1.0])
    # per-token advantages weigh each token's log-prob by its own step's advantage
    logp = torch.zeros(1, len(ids), requires_grad=True)
    m = torch.tensor([mask], dtype=torch.float32)
    loss, _ = policy_gradient_loss(logp, logp.detach(), logp.detach(), torch.tensor([tok]), m, kl_coef=0.0)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-a / 3 for a in tok])
