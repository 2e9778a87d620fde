"""Metrics on hand-made trajectories whose funnel stages and scores are known by construction."""

from __future__ import annotations

import pytest

from eval.metrics import citation_precision, citation_recall, funnel_stages, is_abstention, qa_metrics
from research_agent.trajectory import Step, Trajectory

GOLD_DOC = "squad/Nile/3"
GOLD_CHUNK = f"{GOLD_DOC}#0"
OTHER = "squad/Amazon/1#0"


def traj(
    *,
    search_hits=(),
    open_doc=None,
    find_matches=None,
    citations=(),
    answer="Nile",
    gold_docs=(GOLD_DOC,),
    answers=("Nile",),
    seconds=2.0,
) -> Trajectory:
    steps = []
    if search_hits is not None:
        hits = list(search_hits)
        steps.append(
            Step("search", "longest river", info={"hits": hits, "doc_ids": [h.split("#")[0] for h in hits]})
        )
    if open_doc:
        steps.append(
            Step("open", open_doc, info={"doc_id": open_doc, "page": 1, "chunk_ids": [f"{open_doc}#0"]})
        )
    if find_matches is not None:
        steps.append(Step("find", "river", info={"doc_id": open_doc, "matches": list(find_matches)}))
    steps.append(Step("answer", answer or "", info={"citations": list(citations), "supported": {}}))
    gold = {"answers": list(answers)}
    if gold_docs:
        gold["supporting_docs"] = list(gold_docs)
    return Trajectory(
        question="What is the longest river?",
        id=str(id(steps)),
        gold=gold,
        steps=steps,
        answer=answer,
        citations=list(citations),
        retrieved={
            GOLD_CHUNK: "The Nile is the longest river in Africa.",
            OTHER: "The Amazon carries the most water.",
        },
        token_mask=[1] * 10 + [0] * 5,
        meta={"seconds": seconds},
    )


def test_funnel_stops_at_the_first_missing_stage():
    full = traj(
        search_hits=[OTHER, GOLD_CHUNK], open_doc=GOLD_DOC, find_matches=[GOLD_CHUNK], citations=[GOLD_CHUNK]
    )
    assert funnel_stages(full) == dict.fromkeys(["retrieved", "opened", "found", "cited", "correct"], True)

    never_opened = traj(search_hits=[GOLD_CHUNK], open_doc=None, citations=[GOLD_CHUNK])
    stages = funnel_stages(never_opened)
    assert stages["retrieved"] and not stages["opened"]
    assert not stages["cited"] and not stages["correct"], "later stages need every earlier one"
    alone = funnel_stages(never_opened, cumulative=False)
    assert alone["cited"] and alone["correct"] and not alone["found"]

    wrong_doc = traj(search_hits=[OTHER], open_doc="squad/Amazon/1", find_matches=[OTHER], citations=[OTHER])
    assert not any(funnel_stages(wrong_doc).values())

    wrong_answer = traj(
        search_hits=[GOLD_CHUNK],
        open_doc=GOLD_DOC,
        find_matches=[GOLD_CHUNK],
        citations=[GOLD_CHUNK],
        answer="Amazon",
    )
    stages = funnel_stages(wrong_answer)
    assert stages["cited"] and not stages["correct"]


def test_funnel_is_undefined_without_gold_passage():
    assert funnel_stages(traj(search_hits=[GOLD_CHUNK], gold_docs=())) is None


def test_chunk_level_gold_evidence():
    t = traj(
        search_hits=[GOLD_CHUNK],
        open_doc=GOLD_DOC,
        find_matches=[GOLD_CHUNK],
        citations=[GOLD_CHUNK],
        gold_docs=(),
    )
    t.gold["supporting"] = [GOLD_CHUNK]
    assert all(funnel_stages(t).values())
    t.gold["supporting"] = [f"{GOLD_DOC}#5"]  # another chunk of the same document is not the evidence
    assert not funnel_stages(t)["retrieved"]


def test_citation_precision_and_recall():
    t = traj(search_hits=[GOLD_CHUNK, OTHER], citations=[GOLD_CHUNK, OTHER])
    assert citation_precision(t) == pytest.approx(0.5)
    assert citation_recall(t) == pytest.approx(1.0)
    # without a known gold passage, a cited chunk that contains the answer still counts as support
    t2 = traj(search_hits=[GOLD_CHUNK], citations=[GOLD_CHUNK], gold_docs=())
    assert citation_precision(t2) == 1.0
    assert citation_recall(t2) is None
    assert citation_precision(traj(citations=())) is None


def test_abstention_detection():
    assert is_abstention(None) and is_abstention("") and is_abstention("Not found in the corpus.")
    assert is_abstention("I don't know")
    assert not is_abstention("Nile")


def test_qa_metrics_aggregates_known_values():
    trajs = [
        traj(
            search_hits=[GOLD_CHUNK],
            open_doc=GOLD_DOC,
            find_matches=[GOLD_CHUNK],
            citations=[GOLD_CHUNK],
            seconds=1.0,
        ),
        traj(
            search_hits=[GOLD_CHUNK],
            open_doc=GOLD_DOC,
            find_matches=None,
            citations=[],
            answer="Nile river",
            seconds=3.0,
        ),
        traj(search_hits=[OTHER], answer="not found", seconds=2.0),
        traj(search_hits=[OTHER], answer="Amazon", citations=[OTHER], seconds=2.0),
    ]
    m = qa_metrics(trajs)
    assert m["n"] == 4 and m["funnel_n"] == 4
    assert m["em"] == pytest.approx(0.25)
    assert m["f1"] == pytest.approx((1 + 2 / 3 + 0 + 0) / 4)
    assert m["answer_rate"] == pytest.approx(0.75) and m["abstain_rate"] == pytest.approx(0.25)
    assert m["incorrect_rate"] == pytest.approx(0.5)  # "Nile river" (not EM) and "Amazon"
    funnel = tuple(m[f"funnel_{s}"] for s in ("retrieved", "opened", "found", "cited", "correct"))
    assert funnel == (2, 2, 1, 1, 1)
    assert m["funnel_opened_rate"] == pytest.approx(0.5)
    assert m["reached_cited_rate"] == pytest.approx(0.25) and m["reached_correct_rate"] == pytest.approx(0.25)
    assert m["citation_precision"] == pytest.approx(0.5) and m["citation_precision_n"] == 2
    assert m["searches"] == 1 and m["turns"] == pytest.approx((4 + 3 + 2 + 2) / 4)
    assert m["generated_tokens"] == 10 and m["seconds"] == pytest.approx(2.0) and m["total_seconds"] == 8.0
    assert all(isinstance(v, float) for v in m.values())


def test_boolean_answers_and_unanswerable_items():
    yes = traj(search_hits=[], answer="Yes, because frost forms in December.", answers=("yes",), gold_docs=())
    yes.gold["answer_type"] = "boolean"
    no_gold = traj(search_hits=[], answer="Paris", answers=(), gold_docs=())
    abstained = traj(search_hits=[], answer="not found", answers=(), gold_docs=())
    m = qa_metrics([yes, no_gold, abstained])
    assert m["n_answerable"] == 1 and m["em"] == 1.0
    assert m["n_unanswerable"] == 2 and m["abstention_unanswerable"] == pytest.approx(0.5)
    assert "funnel_retrieved" not in m and m["funnel_n"] == 0


def test_empty_run():
    assert qa_metrics([]) == {"n": 0.0}
