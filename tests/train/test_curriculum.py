"""The learnability curriculum: kinds drawn by how often their groups give signal, reproducibly."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from research_agent.code.tasks import CodeTask
from research_agent.train.config import ConfigError, TrainConfig
from research_agent.train.curriculum import LearnabilityCurriculum, OrderedDraw, make_curriculum, task_kind
from research_agent.train.rl import train_rl

KINDS = ["easy"] * 6 + ["mid"] * 6 + ["hard"] * 6
RATE = {"easy": 1.0, "mid": 0.5, "hard": 0.0}  # always right, learnable, always wrong


def _simulate(cur: LearnabilityCurriculum, steps: int, per_step: int = 4) -> Counter:
    drawn: Counter = Counter()
    for step in range(steps):
        idx = cur.draw(step, 0, per_step)
        drawn.update(cur.kinds[i] for i in idx)
        cur.update(idx, [RATE[cur.kinds[i]] for i in idx])
    return drawn


def test_learnable_kinds_are_drawn_most_and_none_is_dropped():
    cur = LearnabilityCurriculum(KINDS, seed=0)
    assert cur.weights() == pytest.approx({"easy": 1 / 3, "mid": 1 / 3, "hard": 1 / 3})  # unseen: the prior
    drawn = _simulate(cur, steps=30)
    w = cur.weights()
    assert w["mid"] > 0.6 and w["easy"] < 0.2 and w["hard"] < 0.2
    assert drawn["mid"] > drawn["easy"] + drawn["hard"]
    assert drawn["easy"] > 0 and drawn["hard"] > 0  # the floor and the decay keep re-testing them


def test_a_kind_that_becomes_learnable_is_drawn_again():
    """The estimate decays: a kind that was hopeless earlier rises once its groups start to split."""
    cur = LearnabilityCurriculum(KINDS, seed=1)
    _simulate(cur, steps=15)
    before = cur.weights()["hard"]
    rate_later = {**RATE, "hard": 0.5}
    for step in range(15, 40):
        idx = cur.draw(step, 0, 4)
        cur.update(idx, [rate_later[cur.kinds[i]] for i in idx])
    assert cur.weights()["hard"] > 2 * before


def test_each_kind_is_read_in_its_own_order_without_repeats_until_it_wraps():
    cur = LearnabilityCurriculum(KINDS, seed=0, floor=1.0)  # floor 1: every kind equally likely
    idx = cur.draw(0, 0, 60)
    by_kind: dict[str, list[int]] = {}
    for i in idx:
        by_kind.setdefault(KINDS[i], []).append(i)
    for items in by_kind.values():
        first = items[:6]
        assert len(set(first)) == len(first)  # no task twice before all of its kind were drawn
        assert items[6:12] == first[:len(items[6:12])]  # then the same order again


def test_draws_are_reproducible_and_resume_from_the_state():
    a = LearnabilityCurriculum(KINDS, seed=3)
    _simulate(a, steps=5)
    saved = json.loads(json.dumps(a.state_dict()))  # the checkpoint stores plain JSON
    b = LearnabilityCurriculum(KINDS, seed=3)
    b.load_state_dict(saved)
    assert a.draw(5, 0, 8) == b.draw(5, 0, 8)
    c = LearnabilityCurriculum(KINDS, seed=4)
    c.load_state_dict(saved)
    d = LearnabilityCurriculum(KINDS, seed=3)
    d.load_state_dict(saved)
    assert c.draw(5, 0, 32) != d.draw(5, 0, 32)  # the seed matters


@pytest.mark.parametrize("low,high,rate,expected", [
    (0.2, 0.8, 0.5, True), (0.2, 0.8, 0.0, False), (0.2, 0.8, 1.0, False), (0.3, 0.8, 0.25, False),
    (0.2, 0.7, 0.75, False), (0.0, 1.0, 0.25, True), (0.0, 1.0, 1.0, False)])
def test_learnable_means_split_and_inside_the_filter_bounds(low, high, rate, expected):
    assert LearnabilityCurriculum(["k"], seed=0, low=low, high=high).is_learnable(rate) is expected


def test_the_kind_of_a_research_item_and_of_a_code_task():
    assert task_kind({"kind": "capital"}, "kind") == "capital"
    assert task_kind({"question": "q"}, "kind") == "(none)"
    code = CodeTask(id="B1", prompt="p", test_code="", entry_point="f", source="dataframebench",
                    meta={"libs": "pandas"})
    assert task_kind(code, "source") == "dataframebench"
    assert task_kind(code, "libs") == "pandas"
    assert task_kind(code, "kind") == "(none)"


def test_ordered_draw_is_the_old_data_order():
    import random

    order = list(range(5))
    random.Random(7).shuffle(order)
    draw = OrderedDraw(5, 7)
    assert draw.draw(0, 0, 3) + draw.draw(1, 0, 4) == [order[i % 5] for i in range(7)]
    assert draw.state_dict() == {"position": 7}


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="curriculum must be one of"):
        TrainConfig(curriculum={"name": "hardest-first"})
    with pytest.raises(ConfigError, match="curriculum_decay"):
        TrainConfig(curriculum={"name": "learnability", "decay": 0})
    with pytest.raises(ValueError, match="at least one task"):
        make_curriculum("learnability", [], TrainConfig(curriculum={"name": "learnability"}))


def _tasks(path):
    rows = [("What is the capital of France?", "Paris", "capital"), ("What is the capital of Spain?", "Madrid",
            "capital"), ("Which country has Rome as its capital?", "Italy", "country-of-capital"),
            ("Which country has Paris as its capital?", "France", "country-of-capital")]
    path.write_text("".join(json.dumps({"id": f"t{i}", "question": q, "answers": [a], "kind": k, "split": "train"})
                            + "\n" for i, (q, a, k) in enumerate(rows)))
    return path


def _rl_cfg(tmp_path, out, steps):
    return TrainConfig(tasks=str(_tasks(tmp_path / "tasks.jsonl")), out=str(tmp_path / out), steps=steps,
                       prompts_per_step=1, group_size=2, agent={"max_turns": 2, "max_new_tokens": 12, "temperature": 0.0},
                       checkpoints={"every": 1}, filters={"low": 0, "high": 1, "zero_variance": False,
                                                          "drop_void_turns": False},
                       lr=1e-3, compute={"concurrency": 2}, curriculum={"name": "learnability"})


@pytest.mark.model
def test_rl_with_the_curriculum_logs_weights_and_checkpoints_its_state(tmp_path, small_browser):
    """The real trainer on the fast model: the step logs every kind's draw probability and the
    checkpoint keeps the curriculum's state."""
    train_rl(_rl_cfg(tmp_path, "run", 1), browser=small_browser, progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    weights = {k: v for k, v in row.items() if k.startswith("curriculum/")}
    assert set(weights) == {"curriculum/capital", "curriculum/country-of-capital"}
    assert sum(weights.values()) == pytest.approx(1.0, abs=1e-3)
    by_kind = {k: v for k, v in row.items() if k.startswith("kind/")}
    (drawn,) = {k.split("/")[1] for k in by_kind}  # one task, so one kind, its whole group
    assert drawn in ("capital", "country-of-capital") and by_kind[f"kind/{drawn}/n"] == 2
    assert by_kind[f"kind/{drawn}/reward"] == pytest.approx(row["reward"])
    assert by_kind[f"kind/{drawn}/pass_rate"] == pytest.approx(row["pass_rate"])
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-1" / "state.json").read_text())
    assert sum(state["curriculum"]["positions"].values()) == 1  # one task drawn
    assert sum(state["curriculum"]["seen"].values()) == 1  # and its group counted


@pytest.mark.model
@pytest.mark.slow
def test_rl_with_the_curriculum_resumes_as_the_whole_run(tmp_path, small_browser):
    train_rl(_rl_cfg(tmp_path, "full", 2), browser=small_browser, progress=False)
    part = _rl_cfg(tmp_path, "part", 1)
    train_rl(part, browser=small_browser, progress=False)
    part.steps = 2
    train_rl(part, resume=True, browser=small_browser, progress=False)
    full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    resumed = [json.loads(x) for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    for key in [k for k in full[1] if k.startswith("curriculum/")] + ["reward", "turns"]:
        assert resumed[1][key] == pytest.approx(full[1][key]), key
