import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reward_fixtures import make_traj

from rewards.base import RewardResult
from rewards.qa import (
    em_reward,
    exact_match,
    f1_reward,
    f1_with_action_penalty,
    normalize_answer,
    token_f1,
)


def test_normalization_drops_case_punctuation_articles_whitespace():
    assert normalize_answer("  The  Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"


def test_f1_hand_worked():
    # pred tokens: [eiffel, tower, paris]; gold: [eiffel, tower]; overlap 2 -> P=2/3, R=1, F1=0.8
    assert token_f1("the Eiffel Tower, Paris", ["Eiffel Tower"]) == pytest.approx(0.8)
    # P = 1/2, R = 1/3 -> F1 = 2*(1/6)/(5/6) = 0.4
    assert token_f1("new york", ["new jersey city"]) == pytest.approx(0.4)


def test_multiple_golds_take_max():
    assert token_f1("barack obama", ["obama", "barack obama"]) == 1.0
    assert exact_match("Obama", ["Barack Obama", "obama"]) == 1.0
    assert exact_match("Obama", ["Barack Obama"]) == 0.0


def test_no_gold_and_empty_prediction():
    assert token_f1("x", []) == 0.0
    assert exact_match("x", None) == 0.0
    assert token_f1("", ["a thing"]) == 0.0


def test_em_and_f1_rewards_flag_missing_gold():
    t = make_traj(answer="Paris", golds=[])
    assert em_reward(t).score == 0.0 and em_reward(t).components["missing_gold"] == 1.0
    assert f1_reward(make_traj(answer="paris.")).score == 1.0


def test_penalties_hand_worked():
    assert f1_with_action_penalty(make_traj("Paris", actions=["search"])).score == pytest.approx(1.0)
    r = f1_with_action_penalty(make_traj("Paris", actions=[]))
    assert r.score == pytest.approx(0.9) and r.components["no_search_penalty"] == pytest.approx(-0.1)
    r = f1_with_action_penalty(make_traj(None, actions=[]))
    assert r.score == pytest.approx(-0.2)
    assert f1_with_action_penalty(make_traj(None, actions=["search"]), beta=0.3).score == pytest.approx(-0.3)
    # answer avoidance is strictly worse than a wrong attempt
    wrong = f1_with_action_penalty(make_traj("Lyon", actions=["search"])).score
    avoid = f1_with_action_penalty(make_traj(None, actions=["search"])).score
    assert avoid < wrong


def test_reward_result_refuses_non_finite():
    with pytest.raises(ValueError):
        RewardResult(math.nan, {})
    with pytest.raises(ValueError):
        RewardResult(math.inf, {})


@given(st.text(max_size=40), st.lists(st.text(max_size=40), max_size=4))
def test_f1_em_in_unit_interval(pred, golds):
    f1 = token_f1(pred, golds)
    em = exact_match(pred, golds)
    assert 0.0 <= f1 <= 1.0 and em in (0.0, 1.0)
    if em == 1.0 and tokens_nonempty(pred):
        assert f1 == 1.0


def tokens_nonempty(s):
    return bool(normalize_answer(s))


@given(st.text(max_size=40), st.text(max_size=40))
def test_f1_symmetric_for_single_gold(a, b):
    assert token_f1(a, [b]) == pytest.approx(token_f1(b, [a]))
