"""The code agent graph: tools end to end in the real sandbox, a real API-docs corpus, token-stream
consistency, malformed turns as observations, limits, rewards, and a tiny real-model run."""

from __future__ import annotations

import pytest

from research_agent.code.agent import (
    CodeAgent,
    CodeAgentConfig,
    RedrawSettings,
    SubmissionSettings,
    run_code_batch,
)
from research_agent.inference.policy import BatchingPolicy, LocalPolicy
from rewards.code import code_shaped_reward, code_torl_reward
from tests.doubles import ScriptedPolicy as _Scripted


def ScriptedPolicy(tokenizer, turns, by_task=None):  # noqa: N802
    return _Scripted(tokenizer, turns, by_key=by_task)


@pytest.fixture(scope="module")
def tasks(humaneval_two):
    return humaneval_two


@pytest.fixture(scope="module")
def docs_browser(json_docs):
    return json_docs


def _fenced(kind: str, code: str) -> str:
    return f"```{kind}\n{code.rstrip()}\n```\n"


def _stream_matches_prompts(policy: ScriptedPolicy, traj) -> None:
    traj.check_consistency()
    for i in range(1, len(traj.steps)):
        prev, s = policy.prompts[i - 1], traj.steps[i - 1]
        assert policy.prompts[i] == prev + s.completion_ids + s.observation_ids
    model_tokens = [t for t, m in zip(traj.token_ids, traj.token_mask, strict=True) if m]
    assert model_tokens == sum((s.completion_ids for s in traj.steps), [])


def test_search_execute_submit_passes_a_correct_solution(smol, tasks, docs_browser):
    _, tok = smol
    task = tasks[0]
    policy = ScriptedPolicy(
        tok,
        [
            "Let me check the docs.\n<search>json dumps serialize</search>",
            _fenced("python", "print(sorted([3, 1, 2]))"),
            _fenced("submit", task.meta["reference"]),
        ],
    )
    cfg = CodeAgentConfig(mode="multi-tool", test_feedback=False)  # the option where a submission ends the task
    traj = CodeAgent(policy, task, docs_browser.fork(), cfg).run()
    assert [s.action for s in traj.steps] == ["search", "execute", "submit"]
    search, execute, submit = traj.steps
    assert any(h.startswith("api/json") for h in search.info["hits"])
    assert "json.dumps" in search.observation
    # the result is a user turn of the chat template; the next assistant turn is open after it
    assert search.observation.startswith("<|im_end|>\n<|im_start|>user\n<result>\n")
    assert search.observation.endswith("</result><|im_end|>\n<|im_start|>assistant\n")
    assert execute.info["ok"] is True and execute.info["error"] is None and "[1, 2, 3]" in execute.observation
    assert submit.info["passed"] is True and "All tests passed." in submit.observation
    assert traj.gold == {"task_id": task.id, "source": "humaneval", "passed": True}
    assert traj.stop_reason == "submit" and traj.answer == task.meta["reference"].strip("\n")
    assert traj.meta["task_type"] == "code" and traj.meta["mode"] == "multi-tool"
    _stream_matches_prompts(policy, traj)
    assert code_shaped_reward(traj).score == 1.0 and code_torl_reward(traj).score == 1.0


def test_wrong_solution_fails_and_erroring_code_is_recorded(smol, tasks, docs_browser):
    _, tok = smol
    task = tasks[0]
    policy = ScriptedPolicy(
        tok,
        [
            "<search>json loads</search>",
            _fenced("python", "print(1 / 0)"),
            _fenced("submit", task.meta["stub"] + "    return False\n"),
        ],
    )
    assert CodeAgentConfig().test_feedback  # the default, as in the seed; off, a submission ends the task
    traj = CodeAgent(policy, task, docs_browser.fork(), CodeAgentConfig(test_feedback=False)).run()
    assert traj.steps[1].info["ok"] is False and "ZeroDivisionError" in traj.steps[1].observation
    assert traj.steps[-1].info["passed"] is False and "Tests failed" in traj.steps[-1].observation
    assert traj.gold["passed"] is False and traj.stop_reason == "submit"
    _stream_matches_prompts(policy, traj)
    assert code_shaped_reward(traj).score == pytest.approx(0.05)  # failed, but searched once
    assert code_torl_reward(traj).score == -1.5  # failed, and executed code raised


def test_test_feedback_answers_a_failing_submission_and_the_last_one_is_scored(smol, tasks):
    _, tok = smol
    task = tasks[0]
    wrong, right = task.meta["stub"] + "    return False\n", task.meta["reference"]
    policy = ScriptedPolicy(tok, [_fenced("submit", wrong), _fenced("submit", right)])
    traj = CodeAgent(policy, task, None, CodeAgentConfig(mode="code-only", test_feedback=True)).run()
    first, second = traj.steps
    assert (first.action, second.action) == ("submit", "submit")
    assert first.info["passed"] is False and first.info["submission"] == 1
    assert "FAIL:" in first.observation and "Fix your code and submit again" in first.observation
    assert "submit again" in tok.decode(traj.prompt_ids)  # the system prompt says the tool answers
    assert second.info["passed"] is True and traj.gold["passed"] is True and traj.answer.strip() == right.strip()
    assert traj.stop_reason == "submit"
    _stream_matches_prompts(policy, traj)
    assert code_shaped_reward(traj).components["submissions"] == 2.0

    again = ScriptedPolicy(tok, [_fenced("submit", wrong), _fenced("submit", wrong)])
    # the same code resubmitted and taken (no redraw): still answered, the episode ends at the limit
    traj = CodeAgent(again, task, None, CodeAgentConfig(mode="code-only", max_turns=2, test_feedback=True,
                                                        redraw=RedrawSettings(repeats=0))).run()
    assert [s.action for s in traj.steps] == ["submit", "submit"] and traj.stop_reason == "submit"
    assert traj.gold["passed"] is False and "Fix your code" in traj.steps[-1].observation


def test_failure_details_name_each_failing_unittest_and_its_last_line():
    from research_agent.code.env import failure_details
    from research_agent.code.sandbox import run_python

    script = (
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    def test_ok(self): self.assertEqual(1, 1)\n"
        "    def test_sum(self): self.assertEqual(sum([1, 2]), 4)\n"
        "    def test_boom(self): raise KeyError('col')\n"
        "unittest.main()\n"
    )
    details = failure_details(run_python(script))
    assert "test_sum" in details and "AssertionError: 3 != 4" in details
    assert "test_boom" in details and "KeyError: 'col'" in details and "test_ok" not in details


def test_malformed_turns_become_observations_and_turn_limit_ends_the_run(smol, tasks):
    _, tok = smol
    policy = ScriptedPolicy(
        tok,
        [
            "I think the answer is to loop over pairs.",  # no tool call
            "<search>itertools combinations</search>",  # search is not a tool in code-only
            "",  # empty output
            "```\nprint(1)\n```\n",  # untagged block
            "still thinking",
        ],
    )
    traj = CodeAgent(policy, tasks[0], None, CodeAgentConfig(mode="code-only")).run()
    assert traj.stop_reason == "max_turns" and len(traj.steps) == 5 and traj.answer is None
    assert all(s.action == "invalid" and not s.valid for s in traj.steps)
    assert "no tool call was found" in traj.steps[0].observation
    assert "search is not available" in traj.steps[1].observation
    assert "empty" in traj.steps[2].observation and "needs a tag" in traj.steps[3].observation
    assert "last turn" in traj.steps[3].observation  # the model is warned before its final turn
    assert "left" not in traj.steps[4].observation  # and no budget note follows the final turn
    assert traj.gold["passed"] is False and traj.has_void_turn
    _stream_matches_prompts(policy, traj)
    assert code_shaped_reward(traj).score == -0.1  # no submission
    assert code_torl_reward(traj).score == -1.0


def test_tool_call_cap_refuses_and_observations_are_truncated(smol, tasks):
    _, tok = smol
    spam = _fenced("python", "print('x' * 5000)")
    policy = ScriptedPolicy(tok, [spam, spam, spam, _fenced("submit", tasks[0].meta["reference"])])
    cfg = CodeAgentConfig(mode="code-only", max_tool_calls=2, observation_tokens=40)
    traj = CodeAgent(policy, tasks[0], None, cfg).run()
    assert [s.action for s in traj.steps] == ["execute", "execute", "execute", "submit"]
    assert "truncated" in traj.steps[0].observation and len(traj.steps[0].observation_ids) < 80
    assert "no tool calls left" in traj.steps[1].observation
    assert traj.steps[2].info.get("refused") and "ok" not in traj.steps[2].info
    assert traj.gold["passed"] is True
    _stream_matches_prompts(policy, traj)


def test_submit_hint_survives_truncation_and_goes_with_the_budget_note(smol, tasks):
    _, tok = smol
    task = tasks[0]
    defines = task.meta["reference"] + "\nprint('x' * 5000)"
    policy = ScriptedPolicy(
        tok, [_fenced("python", defines), _fenced("python", "print(1)"), _fenced("submit", defines)]
    )
    cfg = CodeAgentConfig(mode="code-only", observation_tokens=40)
    traj = CodeAgent(policy, task, None, cfg).run()
    first, second = traj.steps[0].observation, traj.steps[1].observation
    assert "truncated" in first and f"If `{task.entry_point}` does what the task asks, submit it" in first
    assert first.index("submit it") < first.index("(3 tool calls left)")
    assert "submit it" not in second and "(2 tool calls left)" in second
    off = CodeAgent(
        ScriptedPolicy(tok, [_fenced("python", defines)]),
        task,
        None,
        CodeAgentConfig(mode="code-only", observation_tokens=40, max_turns=2,
                        submission=SubmissionSettings(submit_hint=False)),
    ).run()
    assert "submit it" not in off.steps[0].observation
    _stream_matches_prompts(policy, traj)


def test_empty_submit_without_a_run_is_invalid_and_after_one_submits_it(smol, tasks):
    _, tok = smol
    task = tasks[0]
    empty = "```submit\n```\n"
    policy = ScriptedPolicy(tok, [empty, _fenced("python", task.meta["reference"]), empty])
    traj = CodeAgent(policy, task, None, CodeAgentConfig(mode="code-only")).run()
    assert [s.action for s in traj.steps] == ["invalid", "execute", "submit"]
    assert "no code defining `has_close_elements` has run yet" in traj.steps[0].observation
    assert "an empty ```submit block submits the code you last ran" in traj.steps[1].observation
    submit = traj.steps[2]
    assert submit.argument == task.meta["reference"].strip("\n") and submit.info["from_last_run"] is True
    assert traj.gold["passed"] is True and traj.answer == submit.argument
    _stream_matches_prompts(policy, traj)


def test_no_tools_is_one_turn_and_the_block_is_the_submission(smol, tasks):
    _, tok = smol
    policy = ScriptedPolicy(tok, [_fenced("python", tasks[0].meta["reference"]), "never asked"])
    traj = CodeAgent(policy, tasks[0], None, CodeAgentConfig(mode="no-tools")).run()
    assert [s.action for s in traj.steps] == ["submit"] and traj.gold["passed"] is True
    prose = ScriptedPolicy(tok, ["You should compare every pair of numbers."])
    traj = CodeAgent(prose, tasks[0], None, CodeAgentConfig(mode="no-tools")).run()
    assert traj.stop_reason == "max_turns" and len(traj.steps) == 1 and traj.gold["passed"] is False
    traj.check_consistency()
    # turns end at a loop unless the config says otherwise
    assert policy.loop_flags == [True] and prose.loop_flags == [True]
    plain = ScriptedPolicy(tok, ["x"])
    CodeAgent(plain, tasks[0], None, CodeAgentConfig(mode="no-tools", stop_loops=False)).run()
    assert plain.loop_flags == [False]


def test_batch_keeps_input_order_and_shares_generate_calls(smol, tasks):
    _, tok = smol
    right, wrong = tasks
    policy = ScriptedPolicy(
        tok,
        [],
        by_task={
            right.entry_point: [_fenced("python", "print(2)"), _fenced("submit", right.meta["reference"])],
            wrong.entry_point: [_fenced("python", "print(3)"), _fenced("submit", "def nothing():\n    pass")],
        },
    )
    items = [{"id": "a", "task": right}, {"id": "b", "task": wrong}]
    seen = []
    trajs = run_code_batch(
        items,
        policy,
        None,
        CodeAgentConfig(mode="code-only"),
        progress=False,
        on_result=lambda t: seen.append(t.id),
        concurrency=2,
    )
    assert [t.id for t in trajs] == ["a", "b"] and sorted(seen) == ["a", "b"]
    assert [t.gold["passed"] for t in trajs] == [True, False]
    assert max(policy.batch_sizes) == 2  # the two trajectories' turns went out in one generate call
    with pytest.raises(TypeError, match="CodeTask"):
        run_code_batch([{"id": "x", "task": "not a task"}], policy, None, progress=False)


def test_too_long_task_is_an_error_trajectory_not_a_crash(smol, tasks):
    _, tok = smol
    trajs = run_code_batch(
        [{"id": "long", "task": tasks[0]}],
        ScriptedPolicy(tok, []),
        None,
        CodeAgentConfig(max_total_tokens=64),
        progress=False,
    )
    assert trajs[0].stop_reason == "error" and "too long" in trajs[0].meta["error"]
    assert trajs[0].gold["passed"] is False


def test_config_rejects_unknown_mode():
    with pytest.raises(ValueError, match="unknown mode"):
        CodeAgentConfig(mode="tools")


def test_tiny_real_model_run_stays_within_limits(smol, tasks, docs_browser):
    model, tok = smol
    policy = BatchingPolicy(LocalPolicy(model, tok, name="smollm2-135m"))
    cfg = CodeAgentConfig(mode="multi-tool", max_turns=2, max_new_tokens=32)
    trajs = run_code_batch([{"id": "t", "task": tasks[0]}], policy, docs_browser, cfg, progress=False)
    traj = trajs[0]
    traj.check_consistency()
    assert 1 <= len(traj.steps) <= 2 and traj.stop_reason in ("submit", "max_turns", "max_tokens")
    assert all(len(s.completion_ids) <= 32 for s in traj.steps)
    assert all(s.action in ("search", "execute", "submit", "invalid") for s in traj.steps)
    assert isinstance(traj.gold["passed"], bool)
    code_shaped_reward(traj)
    code_torl_reward(traj)


def test_inline_observations_stay_in_the_models_turn(smol, tasks):
    """observation_format=inline (seed 004): the result is appended to the model's own turn."""
    _, tok = smol
    task = tasks[0]
    policy = ScriptedPolicy(
        tok, [_fenced("python", "print(6 * 7)"), _fenced("submit", task.meta["reference"])]
    )
    cfg = CodeAgentConfig(mode="code-only", observation_format="inline")
    traj = CodeAgent(policy, task, None, cfg).run()
    assert (
        traj.steps[0].observation.startswith("\n<result>\n42")
        and "<|im_start|>" not in traj.steps[0].observation
    )
    _stream_matches_prompts(policy, traj)
    with pytest.raises(ValueError, match="observation_format"):
        CodeAgentConfig(observation_format="xml")
