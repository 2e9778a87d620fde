"""The proof that a refactor changed nothing: greedy episodes and one RL step against a recording.

``tests/fixtures/equivalence.json`` was recorded (``python tests/agent/equivalence.py``) with the code
as it was before the research and code agent loops were merged into one, and re-recorded for two
changes meant to change behaviour: the research prompt's line on multi-step questions, and test
feedback becoming the code agent's default (with ``test_feedback=False`` the code episodes still
matched the first recording). The same episodes run
here must give the same actions, observations, answers, token streams and masks, and the RL step
the same metrics and LoRA weights up to float tolerance. Re-record it only for a change that is
meant to change behaviour, and say so in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from equivalence import RL_FIELDS, record

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "equivalence.json"


@pytest.fixture(scope="module")
def recorded(smol, small_browser, small_corpus_dir, json_docs, tmp_path_factory):
    from research_agent.code.tasks import load_tasks

    work = tmp_path_factory.mktemp("equivalence")
    model, tok = smol
    result = record(model, tok, small_browser, small_corpus_dir, json_docs.fork(), load_tasks("humaneval", limit=2),
                    work)
    return json.loads(json.dumps(result))  # as the recording was stored (tuples become lists)


@pytest.fixture(scope="module")
def expected():
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("kind", ["research", "managed", "code"])
def test_episodes_are_unchanged(recorded, expected, kind):
    assert len(recorded[kind]) == len(expected[kind])
    for got, want in zip(recorded[kind], expected[kind], strict=True):
        for key in want:  # one key at a time, so a failure names what changed
            assert got[key] == want[key], f"{kind} {want['id']}: {key} changed"


def test_the_rl_step_is_unchanged(recorded, expected):
    got, want = recorded["rl"], expected["rl"]
    assert want["trained_trajectories"] > 0 and want["loss"] != 0.0  # the recording exercised the update
    for key in (*RL_FIELDS, "lora_abs_sum", "lora_tensors"):
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
