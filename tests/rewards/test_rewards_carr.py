import pytest
from reward_fixtures import make_traj

from rewards.carr import CaRRReward
from rewards.judge import OfflineSupportJudge

RUBRICS = [
    {"id": "r1", "fact": "Marie Curie was born in Warsaw", "entity": "Warsaw", "answer_link": True},
    {"id": "r2", "fact": "Marie Curie won the Nobel Prize in Physics in 1903", "entity": "Marie Curie"},
]
DOCS = {
    "d1": "Marie Curie was born in Warsaw in 1867.",
    "d2": "In 1903 Marie Curie won the Nobel Prize in Physics.",
    "d3": "Bananas are yellow.",
}


def _carr(**kw):
    return CaRRReward(judge=OfflineSupportJudge(use_embeddings=False), **kw)


def _traj(answer="Warsaw", citations=("d1", "d2"), rubrics=RUBRICS, golds=("Warsaw",)):
    t = make_traj(
        answer=answer, golds=list(golds), citations=list(citations), retrieved=DOCS, rubrics=rubrics
    )
    t.steps[0].completion = "Marie Curie is the physicist; where was she born?"
    return t


def test_all_rubrics_satisfied_and_connected():
    r = _carr().rubric_reward(_traj())
    assert r.score == 1.0 and r.components["supported"] == 1.0


def test_rubric_supported_but_disconnected():
    # r2 is supported by d2 and its entity is identified, but nothing ties it to the answer:
    # r1's fact does not mention "Marie Curie" as an entity node and they share no document.
    rubrics = [
        {"id": "r1", "fact": "The city was the birthplace in 1867", "entity": "Warsaw", "answer_link": True},
        {"id": "r2", "fact": "Marie Curie won the Nobel Prize in Physics in 1903", "entity": "Marie Curie"},
    ]
    docs = {**DOCS, "d1": "The city was the birthplace in 1867 of a famous scientist."}
    t = make_traj(answer="Warsaw", golds=["Warsaw"], citations=["d1", "d2"], retrieved=docs, rubrics=rubrics)
    t.steps[0].completion = "Marie Curie"
    r = _carr().rubric_reward(t)
    assert r.components["satisfied"] == 1.0
    assert r.score == pytest.approx(0.5)
    # Connect them: r1's fact names Marie Curie -> shared entity node -> r2 reachable.
    rubrics[0]["fact"] = "Marie Curie was born in Warsaw in 1867"
    t.retrieved["d1"] = "Marie Curie was born in Warsaw in 1867."
    assert _carr().rubric_reward(t).score == pytest.approx(1.0)


def test_uncited_document_does_not_support():
    r = _carr().rubric_reward(_traj(citations=("d1", "d3", "ghost")))
    assert r.score == pytest.approx(0.5)
    assert r.components["unknown_citations"] == 1.0


def test_unidentified_entity_fails_rubric():
    t = _traj()
    t.steps[0].completion = "no names here"
    t.answer = "Warsaw"
    # r2's entity "Marie Curie" is named nowhere the agent wrote -> only r1 counts
    assert _carr().rubric_reward(t).score == pytest.approx(0.5)


def test_mixing_modes():
    wrong = _traj(answer="Krakow")
    wrong.steps[0].completion = "Marie Curie Warsaw"
    right = _traj()
    c = _carr(alpha=0.3)
    assert c(right).score == pytest.approx(0.7 + 0.3 * 1.0)
    assert c(wrong).score == pytest.approx(0.0)  # correct_only: no rubric credit for a wrong answer
    a = _carr(alpha=0.3, mode="always")
    assert a(wrong).score == pytest.approx(0.3 * a.rubric_reward(wrong).score)
    assert a(wrong).score > 0


def test_missing_rubrics_falls_back_to_outcome():
    r = _carr()(_traj(rubrics=[]))
    assert r.score == 1.0 and r.components["rubric_missing_rubrics"] == 1.0


def test_bad_config():
    with pytest.raises(ValueError):
        CaRRReward(mode="sometimes")
    with pytest.raises(ValueError):
        CaRRReward(alpha=1.5)


def test_llm_judge_plugs_in():
    from rewards.judge import LLMSupportJudge

    seen = []

    def judge(prompt):
        seen.append(prompt)
        return "yes"

    c = CaRRReward(judge=LLMSupportJudge(judge))
    assert c.rubric_reward(_traj()).score == 1.0
    n = len(seen)
    c.rubric_reward(_traj())
    assert len(seen) == n  # cached by content hash
