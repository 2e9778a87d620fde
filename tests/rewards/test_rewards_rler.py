import pytest
from reward_fixtures import make_traj

from rewards.judge import OfflineSupportJudge
from rewards.rler import EvolvingRubricReward

DOCS = {"d1": "Paris is the capital of France.", "d2": "Bananas are yellow."}


def _rler(**kw):
    return EvolvingRubricReward(judge=OfflineSupportJudge(use_embeddings=False), **kw)


def _t(citations, answer="Paris is the capital of France [d1]."):
    return make_traj(answer=answer, citations=citations, retrieved=DOCS)


def test_ladder_checks():
    r = _rler()
    assert r.checks(_t(["ghost"])) == {
        "any_citation": 1.0,
        "retrieved_citation": 0.0,
        "supported_citation": 0.0,
        "all_supported": 0.0,
    }
    assert r.checks(_t(["d2"]))["retrieved_citation"] == 1.0
    assert r.checks(_t(["d2"]))["supported_citation"] == 0.0
    assert r.checks(_t(["d1", "d2"]))["supported_citation"] == 1.0
    assert r.checks(_t(["d1", "d2"]))["all_supported"] == 0.0  # d2 supports nothing
    assert r.checks(_t(["d1"]))["all_supported"] == 1.0
    assert r.checks(_t([]))["any_citation"] == 0.0


def test_tightens_after_threshold_and_not_before():
    r = _rler(threshold=0.8, window=3)
    stuffed = _t(["d2"])  # a retrieved but irrelevant citation
    # level 0: any citation passes; the window must fill before the level may tighten
    assert r(stuffed).score == 1.0 and r.level == 0
    assert r(stuffed).score == 1.0 and r.level == 0
    third = r(stuffed)
    assert third.components["tightened"] == 1.0 and r.level == 1
    # level 1 (retrieved citation) is also passed -> tightens again after three
    for _ in range(3):
        r(stuffed)
    assert r.level == 2
    # level 2 demands support: the stuffed citation now scores 0 and the level holds
    assert r(stuffed).score == 0.0
    for _ in range(5):
        r(stuffed)
    assert r.level == 2


def test_mean_below_threshold_does_not_tighten():
    r = _rler(threshold=0.8, window=3)
    for t in (_t(["d1"]), _t([]), _t(["d1"]), _t([])):
        r(t)
    assert r.level == 0


def test_evaluate_is_stateless_and_state_round_trips():
    r = _rler(window=2)
    r(_t(["d1"]))
    before = r.state_dict()
    assert r.evaluate(_t(["d2"]), level=3).score == 0.0
    assert r.state_dict() == before
    r2 = _rler(window=2)
    r2.load_state_dict({**before, "level": 2})
    assert r2.level == 2 and list(r2.history) == [1.0]
    with pytest.raises(ValueError):
        r2.load_state_dict({"level": 9})
    with pytest.raises(ValueError):
        r.evaluate(_t([]), level=7)
    with pytest.raises(ValueError):
        EvolvingRubricReward(levels=("bogus",))
