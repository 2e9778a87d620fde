import pytest
from reward_fixtures import make_traj

from research_agent.trajectory import Step
from rewards.toolrl import format_reward, tool_call_match, tool_call_reward


def test_format_well_formed_and_broken():
    assert format_reward(make_traj(actions=["search", "open"])).score == 1.0
    # no final answer
    assert format_reward(make_traj(answer=None, actions=["search"])).score == 0.0
    # invalid turn
    t = make_traj(actions=["search", "invalid"])
    r = format_reward(t)
    assert r.score == 0.0 and r.components["valid_share"] == pytest.approx(2 / 3)
    # a step after the answer
    t = make_traj(actions=["search"])
    t.steps.append(Step(action="search", argument="late"))
    assert format_reward(t).score == 0.0
    # empty tool argument
    t = make_traj(actions=["search"])
    t.steps[0].argument = "  "
    assert format_reward(t).components["arguments_present"] == 0.0
    assert format_reward(make_traj(answer=None, actions=[])).score == 0.0


def test_tool_call_match_hand_worked():
    ref = [{"name": "search", "parameters": {"query": "capital of France"}}]
    exact = tool_call_match([{"name": "search", "parameters": {"query": "Capital of France"}}], ref)
    assert exact.score == pytest.approx(3.0)
    # right tool and parameter name, wrong value: (1 + 1 + 0)/3 -> 6*2/3 - 3 = 1
    assert tool_call_match([("search", {"query": "lyon"})], ref).score == pytest.approx(1.0)
    # wrong tool: 0/3 -> -3
    assert tool_call_match([("open", {"id": "x"})], ref).score == pytest.approx(-3.0)
    # extra wrong parameter name: name 1, params 1/2, value 1 -> 6*2.5/3 - 3 = 2
    assert tool_call_match([("search", {"query": "capital of france", "k": 5})], ref).score == pytest.approx(
        2.0
    )


def test_tool_call_reward_from_trajectory():
    t = make_traj(actions=["search"], reference_calls=[{"name": "search", "arguments": {"query": "arg0"}}])
    assert tool_call_reward(t).score == pytest.approx(3.0)
    assert tool_call_reward(make_traj()).components["missing_reference_calls"] == 1.0
    bad = make_traj(reference_calls=[42])
    assert tool_call_reward(bad).score == -3.0


def test_tool_call_match_rejects_garbage():
    with pytest.raises(ValueError):
        tool_call_match([42], [("search", {})])
