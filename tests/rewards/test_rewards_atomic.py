import pytest
from reward_fixtures import make_traj

from rewards.atomic import AtomicThoughtReward, LLMThoughtScorer, split_atomic_thoughts
from rewards.base import RewardResult
from rewards.schedule import Schedule


def _traj():
    t = make_traj(answer="Paris", actions=["search"], question="What is the capital of France?")
    t.steps[0].completion = "<plan>Find the capital of France.</plan><search>capital of France</search>"
    t.steps[0].observation = "Paris is the capital and largest city of France."
    t.steps[1].completion = "The capital of France is Paris. <answer>Paris</answer>"
    t.steps[1].info["thought"] = "<verification>Paris is the capital of France per the source.</verification>"
    return t


def test_split_tags_sentences_and_info_thoughts():
    units = split_atomic_thoughts(_traj())
    assert [(u.kind, u.step) for u in units] == [("plan", 0), ("sentence", 1), ("verification", 1)]
    assert units[0].text == "Find the capital of France."


def test_heuristic_scores_grounded_units_higher():
    good = AtomicThoughtReward(weight=1.0)(_traj())
    bad = _traj()
    bad.steps[0].completion = "<plan>Bananas potassium weather.</plan><plan>Bananas potassium weather.</plan>"
    worse = AtomicThoughtReward(weight=1.0)(bad)
    assert good.components["thought"] > worse.components["thought"]
    assert 0.0 <= worse.score <= good.score <= 1.0


def test_weight_decays_with_training_step():
    r = AtomicThoughtReward(scorer=lambda t, units: [0.0] * len(units))
    t = _traj()  # F1 = 1, thought score 0
    assert r(t, step=0).score == pytest.approx(0.5)
    assert r(t, step=250).score == pytest.approx(0.75)
    assert r(t, step=500).score == pytest.approx(1.0)
    assert AtomicThoughtReward.uses_step


def test_no_thoughts_gives_zero_process_score():
    t = make_traj()
    for s in t.steps:
        s.completion = "<search>x</search>"
    r = AtomicThoughtReward(weight=Schedule.constant(0.5))(t)
    assert r.components["units"] == 0 and r.score == pytest.approx(0.5)


def test_llm_scorer_parses_and_clamps():
    replies = iter(["8", "garbage", "15"])
    s = LLMThoughtScorer(lambda p: next(replies))
    r = AtomicThoughtReward(scorer=s, weight=1.0, outcome=lambda t: RewardResult(0.0, {}))(_traj())
    assert r.components["thought"] == pytest.approx((0.8 + 0.0 + 1.0) / 3)
