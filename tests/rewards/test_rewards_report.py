import pytest
from reward_fixtures import make_traj

from rewards.report import ReportReward

BODY = "Solar power in Germany grew fast [c1].\n\nWind power grew too [c2].\n\nCosts fell sharply [ghost]."
REPORT = "# Solar power in Germany\n\n## Findings\n\n" + BODY + "\n\n## Conclusion\n\nGrowth continues [c1]."


def _t(answer=REPORT):
    return make_traj(
        answer=answer,
        question="How did solar power in Germany grow?",
        citations=["c1", "c2"],
        retrieved={"c1": "x", "c2": "y"},
    )


def test_hard_levels_zero_when_violated():
    r = ReportReward(required_sections=("findings", "conclusion"), relevance="lexical", target_words=40)
    assert r(_t()).components["hard_ok"] == 1.0
    assert r(_t(BODY)).score == 0.0  # no headings
    assert ReportReward(required_sections=("methods",), relevance="lexical")(_t()).score == 0.0
    assert r(_t("")).score == 0.0


def test_soft_levels_hand_worked():
    r = ReportReward(relevance="lexical", target_words=40, length_tolerance=0.2, min_paragraphs=3)
    res = r(_t())
    # 4 body paragraphs, 3 cite a known id ([ghost] does not)
    assert res.components["citations"] == pytest.approx(3 / 4)
    assert res.components["structure"] == 1.0
    # question content words ("how" is a stopword): solar, power, germany, grow; only "grew" is written
    assert res.components["relevance"] == pytest.approx(3 / 4)
    assert 0.0 < res.score <= 1.0


def test_length_score():
    r = ReportReward(target_words=100, length_tolerance=0.2)
    assert r._length(100) == 1.0 and r._length(120) == 1.0
    assert r._length(130) == pytest.approx(0.5)
    assert r._length(140) == pytest.approx(0.0) and r._length(1000) == 0.0


def test_bad_config():
    with pytest.raises(ValueError):
        ReportReward(relevance="vibes")
