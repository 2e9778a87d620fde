"""Both task types satisfy ``TaskType``: every member the trainer and the eval runner ask for is there with
the protocol's parameters, and each one works on tiny inputs (real tokenizer, real sandbox, scripted turns)."""

from __future__ import annotations

import inspect
import json
import threading

import pytest

from research_agent.code.agent import CodeAgentConfig
from research_agent.configs import build
from research_agent.tasks import TASK_TYPES, CodeTasks, ResearchTasks, TaskType
from research_agent.train.config import TrainConfig
from tests.doubles import ScriptedPolicy

PROTOCOL_METHODS = [name for name, value in vars(TaskType).items()
                    if inspect.isfunction(value) and not name.startswith("_")]
PROTOCOL_ATTRIBUTES = [name for name in TaskType.__annotations__]


def test_the_protocol_names_what_trainer_and_runner_call():
    assert set(PROTOCOL_METHODS) >= {"prepare", "load_tasks", "make_browser", "agent_config", "item", "group_items",
                                     "run", "run_rollouts", "is_correct", "check_sft", "sft_examples"}
    assert set(PROTOCOL_ATTRIBUTES) == {"name", "defaults", "tools"}


@pytest.mark.parametrize("task_type", [ResearchTasks(), CodeTasks()], ids=["research", "code"])
def test_each_task_type_has_every_member_with_the_protocols_parameters(task_type):
    for name in PROTOCOL_ATTRIBUTES:
        assert hasattr(task_type, name), name
    assert isinstance(task_type.name, str) and isinstance(task_type.defaults, dict)
    assert all(isinstance(t, str) for t in task_type.tools)
    for name in PROTOCOL_METHODS:
        want = inspect.signature(getattr(TaskType, name))
        got = inspect.signature(getattr(type(task_type), name))
        assert list(got.parameters) == list(want.parameters), f"{task_type.name}.{name}{got} is not {name}{want}"
        for p, q in zip(got.parameters.values(), want.parameters.values(), strict=True):
            assert p.kind == q.kind and (p.default is inspect.Parameter.empty) == (q.default is inspect.Parameter.empty), \
                f"{task_type.name}.{name}: parameter {p.name}"
    assert TASK_TYPES[task_type.name].name == task_type.name


@pytest.fixture(scope="module")
def tiny_code_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("tasks") / "tiny.jsonl"
    test = ("import unittest\nclass TestCases(unittest.TestCase):\n    def test_one(self):\n"
            "        self.assertEqual(task_func([3, 1, 2]), [1, 2, 3])\n")
    row = {"task_id": "Tiny/0", "instruct_prompt": "Return the list xs sorted.\n```\ndef task_func(xs):\n```",
           "canonical_solution": "    return sorted(xs)\n", "code_prompt": "def task_func(xs):\n", "test": test,
           "entry_point": "task_func"}
    path.write_text(json.dumps(row) + "\n")
    return f"bigcodebench:{path}"


def _run(task_type, items, policy, browser, config):
    seen, stop = [], threading.Event()
    trajs = task_type.run(items, policy, browser, config, progress=False, on_result=seen.append, concurrency=1,
                          stop=stop)
    assert [t.id for t in trajs] == [it["id"] for it in items] and [t.id for t in seen] == [it["id"] for it in items]
    stop.set()  # once stopped, nothing starts
    assert task_type.run(items, policy, browser, config, progress=False, concurrency=1, stop=stop) == []
    return trajs


def test_research_tasks_work_on_tiny_inputs(smol, tmp_path):
    _, tok = smol
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "q1", "question": "What is the capital of Peru?", "answers": ["Lima"], "split": "train"},
        {"id": "q2", "question": "Capital of Chile?", "answers": ["Santiago"], "split": "test"}]))
    cfg = build(TrainConfig, {"task_type": "research", "tasks": str(tasks), "group_size": 2, "concurrency": 1,
                              "max_turns": 1})  # flat names, as a file or flags give them
    rt = ResearchTasks(guidance=lambda item: "Answer with a city.")
    rt.prepare(cfg)
    [task] = rt.load_tasks(cfg)
    assert task["id"] == "q1"
    assert rt.item(task)["id"] == "q1" and rt.item({"question": "?"})["id"] == ""
    assert [it["id"] for it in rt.group_items(task, 3, cfg)] == ["q1::s3g0", "q1::s3g1"]
    config = rt.agent_config(cfg)
    assert config.max_turns == 1
    policy = ScriptedPolicy(tok, default="<answer>Lima</answer>")
    [traj] = _run(rt, [rt.item(task)], policy, None, config)
    assert traj.gold["answers"] == ["Lima"] and rt.is_correct(traj, cfg)
    assert "Answer with a city." in tok.decode(policy.prompts[0])  # the guidance went before the question
    assert len(rt.run_rollouts(rt.group_items(task, 0, cfg), ScriptedPolicy(tok, default="<answer>Quito</answer>"),
                               None, cfg)) == 2
    assert not rt.is_correct(traj.__class__(question="?", answer="Quito", gold={"answers": ["Lima"]}), cfg)
    export = tmp_path / "sft.jsonl"
    export.write_text(json.dumps({"question": "Capital of Peru?", "turns": [{"completion": "<answer>Lima</answer>"}]})
                      + "\n")
    sft = TrainConfig(task_type="research", stage="sft", tasks=str(export))
    rt.check_sft(sft)
    examples, skipped = rt.sft_examples(tok, sft, tmp_path, False, False)
    assert len(examples) == 1 and skipped == 0 and any(examples[0][1])


def test_code_tasks_work_on_tiny_inputs(smol, tiny_code_spec, tmp_path):
    _, tok = smol
    cfg = build(TrainConfig, {"task_type": "code", "tasks": tiny_code_spec, "code_mode": "code-only", "group_size": 2,
                              "concurrency": 1, "allow_unsafe_sandbox": True, "test_feedback": False,
                              "demo_tasks": 1, "demo_recovery": 0.0})
    ct = CodeTasks()
    ct.prepare(cfg)
    [task] = ct.load_tasks(cfg)
    assert ct.item(task) == {"id": "Tiny/0", "task": task}
    assert [it["id"] for it in ct.group_items(task, 1, cfg)] == ["Tiny/0::s1g0", "Tiny/0::s1g1"]
    assert ct.make_browser(cfg) is None  # code-only searches nothing
    config = ct.agent_config(cfg)
    assert isinstance(config, CodeAgentConfig) and config.mode == "code-only" and config.redraw.repeats == 0
    right = ScriptedPolicy(tok, default="```submit\ndef task_func(xs):\n    return sorted(xs)\n```\n")
    [traj] = _run(ct, [ct.item(task)], right, None, config)
    assert ct.is_correct(traj, cfg)
    wrong = ScriptedPolicy(tok, default="```submit\ndef task_func(xs):\n    return xs\n```\n")
    assert [ct.is_correct(t, cfg) for t in ct.run_rollouts(ct.group_items(task, 0, cfg), wrong, None, cfg)] == \
        [False, False]
    ct.check_sft(cfg)
    examples, skipped = ct.sft_examples(tok, cfg, tmp_path, False, False)
    assert examples and all(any(mask) for _, mask in examples)
