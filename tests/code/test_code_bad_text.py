"""Code that is not UTF-8 (a lone surrogate, as a JSON escape "\\ud800" puts in a string) is a program
error with a clear message, never an exception out of ``run_python``, ``run_tests`` or the code
environment, so one such task cannot abort a ``run_code_batch`` (issue 30)."""

from __future__ import annotations

import pytest

from research_agent.code.env import CodeEnvironment
from research_agent.code.sandbox import run_python
from research_agent.code.tasks import CodeTask, run_tests, sanitized_away

LONE = "print('\ud800')"


@pytest.fixture(scope="module")
def task():
    return CodeTask(
        id="t", prompt="Write f.", test_code="assert f() == 1", entry_point="f", source="test", meta={}
    )


def test_run_python_reports_a_lone_surrogate():
    res = run_python(LONE)
    assert not res.ok and res.returncode is None and not res.timed_out
    assert res.error.startswith("SyntaxError: the code is not valid UTF-8") and "'\\ud800'" in res.error
    res = run_python("print(open('data.txt').read())", files={"data.txt": "x\udcff"})
    assert not res.ok and "file 'data.txt' is not valid UTF-8" in res.error
    assert run_python("print('\\ud800'.encode('utf-8', 'surrogatepass'))").ok  # the escape itself is fine


def test_run_tests_and_sanitizer_report_it_too(task):
    solution = f"def f():\n    return 1\n{LONE}\n"
    res = run_tests(task, solution)
    assert not res.ok and "not valid UTF-8" in res.error
    assert sanitized_away(task, solution) is False
    module = CodeTask(
        id="m",
        prompt="",
        test_code="from solution import f\n\ndef test_f():\n    assert f() == 1\n",
        entry_point="f",
        source="test",
        meta={"test_style": "pytest-module"},
    )
    assert "file 'solution.py' is not valid UTF-8" in run_tests(module, solution).error


def test_environment_turns_are_observations(task):
    env = CodeEnvironment(task)
    obs, info, done = env.run("execute", LONE)
    assert "not valid UTF-8" in obs and info["ok"] is False and not done
    obs, info, done = env.run("submit", f"def f():\n    return 1\n{LONE}\n")
    assert obs.startswith("Tests failed") and "not valid UTF-8" in obs and info["passed"] is False and done


def test_one_such_task_does_not_abort_a_batch(smol, humaneval_two):
    """A policy whose text carries a lone surrogate (an API backend's JSON escape) for one task."""
    from research_agent.code.agent import CodeAgentConfig, run_code_batch
    from research_agent.inference.policy import Generation
    from tests.doubles import ScriptedPolicy

    _, tok = smol
    right, other = humaneval_two

    class SurrogatePolicy(ScriptedPolicy):
        def generate(self, prompts, **kw):
            outs = []
            for p in prompts:
                self.prompts.append(list(p))
                text = self.reply(list(p))
                ids = self.tokenizer.encode(
                    text.encode("utf-8", "replace").decode(), add_special_tokens=False
                )
                outs.append(Generation(text, ids, [-0.1] * len(ids), "stop"))
            return outs

    fenced = "```{}\n{}\n```\n".format
    policy = SurrogatePolicy(
        tok,
        by_key={
            right.entry_point: [fenced("python", "print(2)"), fenced("submit", right.meta["reference"])],
            other.entry_point: [
                fenced("python", LONE),
                fenced("submit", f"{other.meta['reference']}\n{LONE}"),
            ],
        },
    )
    items = [{"id": "a", "task": right}, {"id": "b", "task": other}]
    trajs = run_code_batch(
        items, policy, None, CodeAgentConfig(mode="code-only"), progress=False, concurrency=2
    )
    assert [t.gold["passed"] for t in trajs] == [True, False]
    assert "not valid UTF-8" in trajs[1].steps[0].observation
