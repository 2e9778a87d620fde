import pytest

from research_agent.trajectory import Step, Trajectory
from rewards.code import code_shaped_reward, code_torl_reward


def _code(searches=0, submits=(), exec_errors=()):
    steps = [Step("search", "pandas merge") for _ in range(searches)]
    steps += [
        Step("execute", "print(1)", info={"ok": not e, "error": "boom" if e else None}) for e in exec_errors
    ]
    steps += [Step("submit", "code", info={"passed": p}) for p in submits]
    return Trajectory(question="write f", steps=steps)


def test_seed_shaping():
    assert code_shaped_reward(_code(submits=[True])).score == 1.0
    assert code_shaped_reward(_code(searches=2, submits=[False])).score == pytest.approx(0.10)
    assert code_shaped_reward(_code(searches=5, submits=[False])).score == pytest.approx(0.15)
    assert code_shaped_reward(_code(submits=[False])).score == 0.0
    assert code_shaped_reward(_code(searches=3)).score == pytest.approx(-0.1)
    assert code_shaped_reward(_code(submits=[True, False])).score == pytest.approx(0.0)


def test_torl():
    assert code_torl_reward(_code(submits=[True])).score == 1.0
    assert code_torl_reward(_code(submits=[False])).score == -1.0
    assert code_torl_reward(_code(submits=[True], exec_errors=[False, True])).score == pytest.approx(0.5)
    assert code_torl_reward(_code(exec_errors=[True])).score == pytest.approx(-1.5)
