import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewards.schedule import Schedule


def test_hand_worked_values():
    assert Schedule.constant(0.3).value(1000) == 0.3
    lin = Schedule.linear(0.5, 0.0, 500)
    assert lin.value(0) == 0.5 and lin.value(250) == pytest.approx(0.25) and lin.value(900) == 0.0
    st_ = Schedule.step(100, 0.0, 1.0)
    assert st_.value(99) == 0.0 and st_.value(100) == 1.0
    cos = Schedule.cosine(1.0, 0.0, 100)
    assert cos.value(50) == pytest.approx(0.5) and cos.value(100) == pytest.approx(0.0)
    assert Schedule.linear(1, 2, 0).value(0) == 2.0


def test_from_config_round_trip():
    for s in (Schedule.step(100, 0, 1), Schedule.linear(0.5, 0, 500), Schedule.cosine(1, 0, 10)):
        assert Schedule.from_config(str(s)) == s
        assert Schedule.from_config(s.to_config()) == s
    assert Schedule.from_config(0.3) == Schedule.constant(0.3)
    assert Schedule.from_config("0.25").value(7) == 0.25
    for bad in ("warp(1)", "linear(1,2)", "linear(a,b,c)", "nonsense", None, True, "linear(1,2,-1)"):
        with pytest.raises(ValueError):
            Schedule.from_config(bad)


finite = st.floats(-10, 10, allow_nan=False)


@given(
    st.sampled_from(["linear", "cosine", "step"]),
    finite,
    finite,
    st.integers(0, 1000),
    st.integers(0, 2000),
    st.integers(0, 2000),
)
def test_schedules_monotone(kind, a, b, n, s1, s2):
    sched = Schedule.step(n, a, b) if kind == "step" else getattr(Schedule, kind)(a, b, n)
    lo, hi = sorted((s1, s2))
    v1, v2 = sched.value(lo), sched.value(hi)
    if b >= a:
        assert v1 <= v2 + 1e-9
    else:
        assert v1 >= v2 - 1e-9
    assert min(a, b) - 1e-9 <= v1 <= max(a, b) + 1e-9
