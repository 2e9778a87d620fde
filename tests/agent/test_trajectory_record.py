"""A trajectory's dict is the record written to every store: the same fields, in the same order, as
the dataclass holds, and nothing in it shared with the live trajectory the agent goes on extending."""

from __future__ import annotations

import json
from dataclasses import asdict

from research_agent.trajectory import Step, Trajectory


def _trajectory(managed: bool) -> Trajectory:
    t = Trajectory(question="Which country borders both Chile and Peru?", id="q1",
                   gold={"answers": ["Bolivia"], "support": [{"chunk": "ci#2"}]}, prompt_ids=[1, 2, 3],
                   meta={"model": "smollm2-135m", "timings": {"search": [0.1, 0.2]}})
    first = Step(action="search", argument="countries bordering Chile", completion="<search>...</search>",
                 completion_ids=[5, 6], completion_logprobs=[-0.5, -0.25],
                 info={"hits": [{"id": "ci#2", "score": 0.9}]}, prompt_ids=[1, 2, 3] if managed else [])
    t.append_turn(first)
    t.append_observation(first, "[ci#2] Chile borders Argentina, Bolivia, Peru", [7, 8, 9])
    t.append_turn(Step(action="answer", argument="Bolivia", completion_ids=[10], completion_logprobs=[-0.1]))
    t.answer, t.citations, t.retrieved = "Bolivia", ["ci#2"], {"ci#2": "Chile borders Argentina, Bolivia, Peru"}
    return t


def test_the_record_is_the_dataclass_in_field_order_with_empty_step_prompts_left_out():
    for managed in (False, True):
        t = _trajectory(managed)
        want = asdict(t)
        for s in want["steps"]:
            if not s["prompt_ids"]:
                del s["prompt_ids"]
        got = t.to_dict()
        assert json.dumps(got) == json.dumps(want)  # same keys, same order, same values
        assert ("prompt_ids" in got["steps"][0]) is managed
        assert Trajectory.from_json(t.to_json()).to_dict() == got


def test_the_record_shares_nothing_with_the_trajectory():
    t = _trajectory(managed=True)
    d = t.to_dict()
    t.append_turn(Step(action="search", argument="more", completion_ids=[11], completion_logprobs=[-1.0]))
    t.steps[0].completion_ids.append(99)
    t.steps[0].info["hits"][0]["score"] = 0.0
    t.steps[0].prompt_ids.append(4)
    t.gold["answers"].append("Peru")
    t.meta["timings"]["search"].append(9.9)
    t.citations.append("x#1")
    assert d["token_ids"] == [5, 6, 7, 8, 9, 10] and len(d["steps"]) == 2
    assert d["steps"][0]["completion_ids"] == [5, 6] and d["steps"][0]["prompt_ids"] == [1, 2, 3]
    assert d["steps"][0]["info"]["hits"][0]["score"] == 0.9
    assert d["gold"]["answers"] == ["Bolivia"] and d["meta"]["timings"]["search"] == [0.1, 0.2]
    assert d["citations"] == ["ci#2"]
