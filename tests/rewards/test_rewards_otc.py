import math

import pytest
from reward_fixtures import make_traj

from rewards.otc import OTCReward, otc_tool_reward, tool_productivity


def test_otc_hand_worked():
    n = 2
    assert otc_tool_reward(n, n) == pytest.approx(1.0)  # peak at m = n
    assert otc_tool_reward(0, n) == pytest.approx(0.0)  # m = 0
    # m = 2n: f = 2n*2n/3n = 4n/3 -> sin(2pi/3)
    assert otc_tool_reward(2 * n, n) == pytest.approx(math.sin(2 * math.pi / 3))
    assert otc_tool_reward(0, 0) == pytest.approx(1.0)
    assert otc_tool_reward(1, 0, c=1.0) == pytest.approx(math.cos(math.pi / 3))
    assert otc_tool_reward(1, 3) < otc_tool_reward(2, 3) < otc_tool_reward(3, 3)
    assert otc_tool_reward(4, 3) > otc_tool_reward(9, 3) > otc_tool_reward(100, 3)
    with pytest.raises(ValueError):
        otc_tool_reward(-1, 2)


def test_otc_only_for_correct_answers():
    r = OTCReward()
    right = make_traj("Paris", actions=["search"] * 4, needed_calls=2)
    assert r(right).score == pytest.approx(math.sin(2 * math.pi / 3))
    assert r(make_traj("Paris", actions=["search", "open"], needed_calls=2)).score == pytest.approx(1.0)
    wrong = make_traj("Lyon", actions=["search", "open"], needed_calls=2)
    assert r(wrong).score == 0.0
    missing = r(make_traj("Paris", actions=["search"] * 7))
    assert missing.score == 1.0 and missing.components["missing_needed_calls"] == 1.0


def test_tool_productivity():
    trajs = [make_traj("Paris", actions=["search"] * 2), make_traj("Lyon", actions=["search"] * 2)]
    assert tool_productivity(trajs) == pytest.approx(1 / 4)
    assert tool_productivity([make_traj("Paris", actions=[])]) == 1.0
    assert tool_productivity([]) == 0.0
