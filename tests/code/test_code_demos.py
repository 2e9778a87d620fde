"""Reference-solution demonstrations for the code agent's SFT cold start: scripted from the task's
reference, replayed through the live agent (real sandbox, real tests, smollm2's tokenizer and chat
template), kept only when the tests pass, resumable; and the code SFT stage that trains on them."""

from __future__ import annotations

import json

import pytest
import torch

from research_agent.code.agent import CodeAgentConfig, SubmissionSettings
from research_agent.code.demos import (
    ReplayPolicy,
    breakage,
    broken_version,
    build_demos,
    demo_turns,
    example_call,
    read_demos,
    reference_code,
    search_query,
)
from research_agent.code.tasks import CodeTask
from research_agent.code.tasks import load_tasks as load_code_tasks
from research_agent.inference.models import resolve_model_dir


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m", progress=False))


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """Three tasks in BigCodeBench's JSONL format; the third one's reference is wrong."""
    path = tmp_path_factory.mktemp("tasks") / "demo.jsonl"
    rows = []
    for i, (what, body, check) in enumerate([
        ("Return the list xs sorted ascending.", "return sorted(xs)", "task_func([3, 1, 2]), [1, 2, 3]"),
        ("Return the list xs reversed.", "return xs[::-1]", "task_func([1, 2, 3]), [3, 2, 1]"),
        ("Return the first element of xs.", "return xs[-1]", "task_func([1, 2, 3]), 1"),
    ]):
        test = ("import unittest\nclass TestCases(unittest.TestCase):\n    def test_one(self):\n"
                f"        self.assertEqual({check})\n")
        rows.append({"task_id": f"Demo/{i}", "instruct_prompt": f"{what}\n```\ndef task_func(xs):\n```",
                     "canonical_solution": f"    {body}\n", "code_prompt": "def task_func(xs):\n", "test": test,
                     "entry_point": "task_func"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"bigcodebench:{path}"


def test_reference_loses_docstrings_and_the_query_names_a_specific_call():
    code = ('import pandas as pd\n\ndef task_func(df):\n    """Long docstring\n    repeating the prompt."""\n'
            '    out = pd.DataFrame(df)\n    return out.groupby("a").sum()\n')
    task = CodeTask(id="x", prompt="p", test_code="", entry_point="task_func", source="t", meta={"reference": code})
    ref = reference_code(task)
    assert "docstring" not in ref and ref.startswith("import pandas as pd") and 'groupby("a")' in ref
    compile(ref, "ref", "exec")
    # the constructor is skipped: the first specific call is the method
    assert search_query(ref) == "pandas DataFrame groupby"
    assert search_query("import numpy as np\nx = np.linspace(0, 1)") == "numpy linspace"
    assert search_query("def f(xs):\n    return sorted(xs)") is None
    # a function that is only a docstring keeps it (the body would be empty otherwise)
    only = CodeTask(id="y", prompt="p", test_code="", entry_point="f", source="t",
                    meta={"reference": 'def f():\n    """only"""\n'})
    assert '"""only"""' in reference_code(only)
    assert reference_code(CodeTask(id="z", prompt="p", test_code="", entry_point="f", source="t")) is None
    turns = demo_turns(task, "multi-tool")
    assert [t.split("\n")[-1] if "<search>" in t else t.split("\n")[1] for t in turns] == [
        "<search>pandas DataFrame groupby</search>", "```python", "```submit"]
    assert len(demo_turns(task, "code-only")) == 2 and demo_turns(task, "no-tools")[0].startswith("```python\n")


def test_replay_policy_answers_in_order_and_respects_the_token_budget(tok):
    policy = ReplayPolicy(tok, ["first turn", "second " * 50])
    one = policy.generate([[1, 2]], max_new_tokens=16)[0]
    assert one.text == "first turn" and one.finish_reason == "stop" and one.logprobs == [0.0] * len(one.token_ids)
    two = policy.generate([[1, 2]], max_new_tokens=5)[0]
    assert len(two.token_ids) == 5 and two.finish_reason == "length"
    with pytest.raises(ValueError, match="no turn left"):
        policy.generate([[1]], max_new_tokens=5)


def test_demos_run_through_the_live_agent_and_only_passing_ones_are_kept(tmp_path, tok, spec):
    tasks = load_code_tasks(spec)
    path = tmp_path / "demos.jsonl"
    kept = build_demos(tasks, tok, CodeAgentConfig(mode="code-only"), path, progress=False)
    assert [t.id for t in kept] == ["Demo/0", "Demo/1"]  # Demo/2's reference fails its own test
    assert len(read_demos(path)) == 3  # the failure is recorded too, so a resume does not re-run it
    for traj in kept:
        assert [s.action for s in traj.steps] == ["execute", "submit"] and traj.gold["passed"]
        # the real sandbox ran the code on the example the task's test uses: its printed result came back
        assert traj.steps[0].argument.rstrip().endswith("print(task_func([3, 1, 2]))" if traj.id == "Demo/0"
                                                       else "print(task_func([1, 2, 3]))")
        assert ("[1, 2, 3]" if traj.id == "Demo/0" else "[3, 2, 1]") in traj.steps[0].observation
        assert "All tests passed." in traj.steps[1].observation
        # the submit note was shown after the clean run, and the demonstration takes it: an empty block
        # submits the code that ran (example call included), and that passed
        assert "empty ```submit" in traj.steps[0].observation
        assert traj.steps[1].completion.endswith("```submit\n```\n") and traj.steps[1].info["from_last_run"]
        text = tok.decode(traj.prompt_ids + traj.token_ids)
        assert "<|im_start|>system" in text and "Return the list xs" in text  # smollm2's own chat template
        (ids, mask), = traj.sequences()
        model_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert "```submit" in model_text and "<result>" not in model_text and "All tests" not in model_text
    # resume: nothing rendered again (no new lines), the same demonstrations come back
    again = build_demos(tasks, tok, CodeAgentConfig(mode="code-only"), path, progress=False)
    assert [t.id for t in again] == ["Demo/0", "Demo/1"] and len(path.read_text().splitlines()) == 3
    # a kill mid-write leaves a partial line: it is skipped, that task rendered again
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    assert len(read_demos(path)) == 2
    assert [t.id for t in build_demos(tasks, tok, CodeAgentConfig(mode="code-only"), path, progress=False)] == [
        "Demo/0", "Demo/1"]
    # without the note there is no empty submit to take: the solution is written out again
    bare = build_demos(tasks[:1], tok, CodeAgentConfig(mode="code-only",
                                                       submission=SubmissionSettings(submit_hint=False)), tmp_path / "bare.jsonl",
                       progress=False)
    submit = bare[0].steps[1]
    assert "def task_func(xs):" in submit.completion and not submit.info.get("from_last_run")
    assert bare[0].gold["passed"]


def _task(test_code: str, reference: str = "def task_func(xs):\n    return xs\n") -> CodeTask:
    return CodeTask(id="t", prompt="p", test_code=test_code, entry_point="task_func", source="t",
                    meta={"reference": reference})


def test_example_call_is_the_first_self_contained_test_call():
    head = "import unittest\nclass TestCases(unittest.TestCase):\n"
    fixture = "    def setUp(self):\n        self.df = [1]\n    def test_a(self):\n        r = task_func(self.df)\n"
    mocked = "    @patch('os.listdir')\n    def test_b(self, m):\n        out = task_func([2])\n"
    plain = ('    def test_c(self):\n        """Doc."""\n        data = [[1, 2], [3, 4]]\n'
             "        result = task_func(data, k=2)\n        self.assertEqual(result, 3)\n")
    # the fixture test (self.df) and the mocked one are skipped; setup lines are kept, the result printed
    assert example_call(_task(head + fixture + mocked + plain)) == (
        "data = [[1, 2], [3, 4]]\nresult = task_func(data, k=2)\nprint(result)")
    inline = "    def test_d(self):\n        self.assertEqual(task_func([3, 1]), [1, 3])\n"
    assert example_call(_task(head + inline)) == "print(task_func([3, 1]))"
    loop = "    def test_e(self):\n        for x in [1]:\n            task_func(x)\n"
    assert example_call(_task(head + fixture + loop)) is None
    assert example_call(_task("not python (")) is None


def test_broken_versions_fail_the_way_they_say():
    code = ("import pandas as pd\nimport numpy as np\n\ndef task_func(rows):\n    df = pd.DataFrame(rows)\n"
            "    total = df.sum().sum()\n    return float(total)\n\nimport pandas as pd\n")
    cut, err = broken_version(code, "cut")
    assert err == "SyntaxError" and code.startswith(cut) and len(cut) < len(code)
    with pytest.raises(SyntaxError):
        compile(cut, "cut", "exec")
    dropped, err = broken_version(code, "import")
    assert err == "NameError" and "import pandas" not in dropped and "import numpy as np" in dropped
    scope: dict = {}
    exec(dropped, scope)
    with pytest.raises(NameError, match="'pd'"):
        scope["task_func"]([[1]])
    assert broken_version("def task_func(xs):\n    return sorted(xs)\n", "import") is None  # nothing to drop
    with pytest.raises(ValueError):
        broken_version(code, "typo")
    # the draw is stable per task id and gives about the asked share, half of each kind
    tasks = [CodeTask(id=f"T{i}", prompt="", test_code="", entry_point="f", source="t") for i in range(2000)]
    draws = [breakage(t, 0.5) for t in tasks]
    assert draws == [breakage(t, 0.5) for t in tasks]
    assert 0.45 < sum(d is not None for d in draws) / 2000 < 0.55
    assert 0.4 < draws.count("cut") / max(1, draws.count("cut") + draws.count("import")) < 0.6
    assert all(breakage(t, 0.0) is None for t in tasks)


def test_recovery_demonstration_fails_first_then_fixes_and_submits(tmp_path, tok, spec):
    tasks = load_code_tasks(spec)
    kept = build_demos(tasks, tok, CodeAgentConfig(mode="code-only"), tmp_path / "d.jsonl", recovery=1.0,
                       progress=False)
    assert [t.id for t in kept] == ["Demo/0", "Demo/1"]
    for traj in kept:
        # these references import nothing, so whichever breakage was drawn, the cut one is shown
        assert traj.meta["demo"] == "recovery:cut"
        assert [s.action for s in traj.steps] == ["execute", "execute", "submit"]
        first, second, submit = traj.steps
        assert "SyntaxError" in first.error and "SyntaxError" in first.observation  # the real sandbox's error
        assert second.error is None and "SyntaxError" in second.completion  # the fix names what it fixes
        assert "All tests passed." in submit.observation and traj.gold["passed"]


@pytest.mark.model
def test_code_sft_stage_trains_lora_on_the_demonstrations(tmp_path, spec):
    from research_agent.train.config import TrainConfig
    from research_agent.train.sft import train_sft

    cfg = TrainConfig(stage="sft", task_type="code", tasks=spec, agent={"mode": "code-only"}, out=str(tmp_path / "sft"),
                      epochs=1, compute={"micro_batch": 2}, lr=1e-3, checkpoints={"every": 1})
    summary = train_sft(cfg, progress=False)
    assert summary["examples"] == 2 and summary["steps"] == 1
    out = tmp_path / "sft"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["tokens"] > 20 and torch.isfinite(torch.tensor(rows[0]["loss"]))
    assert len((out / "demos.jsonl").read_text().splitlines()) == 3
    from safetensors.torch import load_file

    weights = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in weights.items())  # B starts at 0: it trained
