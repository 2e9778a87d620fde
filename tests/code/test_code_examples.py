"""Visible tests from docstring examples: parsing HumanEval's formats, the reference check that drops
wrong examples, and test feedback that answers from them and never from the hidden tests."""

from __future__ import annotations

from dataclasses import replace

from research_agent.code.agent import CodeAgent, CodeAgentConfig, RedrawSettings, SubmissionSettings
from research_agent.code.env import draw_seed, failure_details
from research_agent.code.examples import docstring_examples, validated_examples, visible_test_script
from research_agent.code.sandbox import run_python
from research_agent.code.tasks import run_tests
from tests.doubles import ScriptedPolicy

STUB = '''def f(xs, k=1):
    """Examples:
    >>> f([1, 2])
    [2, 1]
    f([3]) ➞ [3]
    f([]) returns []  (nothing to do)
    f([5, 6]) == [6, 5].
    def f(bad) -> None
    Write f() that returns the list reversed.
    >>> f([1, 2])
    [2, 1]
    """
'''


def test_examples_are_parsed_from_doctest_and_prose_formats():
    found = docstring_examples(STUB, "f")
    # doctest's closing quotes at the example's indentation are not part of the expected output;
    # the repeated doctest is kept once; prose with an explanation after the value keeps the value
    assert found == [("f([1, 2])", "[2, 1]"), ("f([3])", "[3]"), ("f([])", "[]"), ("f([5, 6])", "[6, 5]")]
    assert docstring_examples('    """\n    For n = 15, the output should be "1111".\n    """', "g") == [
        ("g(15)", "'1111'")
    ]
    assert docstring_examples('    """\n    Input: [4, 2]\n    Output: [2, 1]\n    """', "g") == [("g([4, 2])", "[2, 1]")]
    # JSON spellings are read as Python's; a result that is not a literal is not an example
    assert docstring_examples("g(1) => true\ng(2) => some list\n", "g") == [("g(1)", "True")]


def test_the_reference_check_drops_examples_the_reference_disagrees_with():
    reference = "def f(xs):\n    return xs[::-1]\n"
    examples = [("f([1, 2])", "[2, 1]"), ("f([1])", "[7]"), ("f(None)", "[]")]
    broken = "def f(xs):\n    return undefined_name\nraise ValueError('import fails')\n"
    assert validated_examples([(reference, examples), (broken, examples[:1])]) == [[examples[0]], []]


def test_visible_tests_name_each_failing_example_and_its_result():
    script = visible_test_script([("f([1, 2])", "[2, 1]"), ("f([3])", "[3]"), ("f([0.1 + 0.2])", "[0.3]")])
    assert run_python("def f(xs):\n    return xs[::-1]\n\n" + script).ok  # floats compare within 1e-6
    res = run_python("def f(xs):\n    return sorted(xs)\n\n" + script)
    assert not res.ok
    assert failure_details(res) == "f([1, 2]) returned [1, 2], expected [2, 1]"
    res = run_python("def f(xs):\n    return xs[5]\n\n" + script)
    assert failure_details(res).splitlines() == [
        "f([1, 2]) raised IndexError: list index out of range",
        "f([3]) raised IndexError: list index out of range",
        "f([0.1 + 0.2]) raised IndexError: list index out of range",
    ]


def test_humaneval_tasks_carry_visible_tests_their_references_pass(humaneval_all):
    with_tests = [t for t in humaneval_all if t.meta["visible_tests"]]
    assert len(with_tests) >= 140  # 145 of 164 when this was written
    assert sum(t.meta["visible_examples"] for t in humaneval_all) >= 400
    median = next(t for t in humaneval_all if t.id == "HumanEval/47")
    assert "15.0" not in median.meta["visible_tests"]  # the docstring's wrong example (the median is 8.0)
    for t in with_tests[:20]:
        assert run_tests(t, t.meta["reference"], visible=True).ok, t.id


def test_feedback_on_humaneval_answers_from_the_examples_and_scores_the_hidden_tests(smol, humaneval_all):
    _, tok = smol
    task = humaneval_all[0]  # has_close_elements: two docstring examples, seven hidden asserts
    wrong = task.meta["stub"] + "    return False\n"
    # right on both docstring examples, wrong on the hidden tests
    fitted = task.meta["stub"] + "    return len(numbers) == 6\n"
    policy = ScriptedPolicy(tok, [f"```submit\n{wrong}```\n", f"```submit\n{fitted}```\n", "unused"])
    traj = CodeAgent(policy, task, None, CodeAgentConfig(mode="code-only", test_feedback=True)).run()
    first, second = traj.steps
    assert first.info["visible_passed"] is False and first.info["passed"] is False
    assert "has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) returned False, expected True" in first.observation
    assert "candidate(" not in first.observation  # nothing of the hidden check is shown
    assert second.info["visible_passed"] is True and "examples in the task pass" in second.observation
    assert traj.stop_reason == "submit" and traj.gold["passed"] is False  # scored on the hidden tests
    assert "All tests passed" not in second.observation

    no_examples = next(t for t in humaneval_all if not t.meta["visible_tests"])
    policy = ScriptedPolicy(tok, [f"```submit\n{no_examples.meta['reference']}```\n", "unused"])
    traj = CodeAgent(policy, no_examples, None, CodeAgentConfig(mode="code-only", test_feedback=True)).run()
    assert len(traj.steps) == 1 and traj.stop_reason == "submit" and traj.gold["passed"] is True
    assert "no examples" in traj.steps[0].observation


def test_a_submitted_stub_means_the_code_that_ran_and_the_option_turns_it_off(smol, humaneval_all):
    from research_agent.code.env import entry_point_is_stub

    assert entry_point_is_stub('def f(x):\n    """Doc."""\n', "f") and entry_point_is_stub("def f(x):\n    ...\n", "f")
    assert entry_point_is_stub('import os\ndef f(x):\n    """Doc."""\n    pass\n', "f")
    assert not entry_point_is_stub('def f(x):\n    """Doc."""\n    return x\n', "f")
    assert not entry_point_is_stub("def g(x):\n    pass\n", "f") and not entry_point_is_stub("def f(:\n", "f")

    _, tok = smol
    task = humaneval_all[0]
    stub = task.meta["stub"]  # the signature and docstring: what qwen wrote in its ```submit blocks
    script = [f"```python\n{task.meta['reference']}```\n", f"```submit\n{stub}```\n", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True)).run()
    submit = traj.steps[1]
    assert submit.info["stub"] and submit.info["from_last_run"] and submit.argument.strip() == task.meta["reference"].strip()
    assert "without a body, so the code you last ran was submitted" in submit.observation
    assert submit.info["visible_passed"] is True and traj.gold["passed"] is True and len(traj.steps) == 2

    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True,
                                     submission=SubmissionSettings(stub_submits_last_run=False))).run()
    assert traj.steps[1].argument.strip() == stub.strip() and traj.steps[1].info["visible_passed"] is False
    assert "returned None" in traj.steps[1].observation and "stub" not in traj.steps[1].info

    # nothing has run: the model is told to write the function, and no submission is tested
    traj = CodeAgent(ScriptedPolicy(tok, [f"```submit\n{stub}```\n"]), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=1)).run()
    assert traj.steps[0].action == "invalid" and "without a body" in traj.steps[0].observation
    assert traj.count("submit") == 0 and not traj.gold.get("passed")


def test_failed_code_run_or_submitted_again_is_named_as_the_failed_submission(smol, humaneval_all):
    _, tok = smol
    task = humaneval_all[0]
    wrong = task.meta["stub"] + "    return False\n"
    script = [f"```submit\n{wrong}```\n", f"```python\n{wrong}\n\n```\n", f"```submit\n{wrong}```\n", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=3,
                                     redraw=RedrawSettings(repeats=0))).run()
    first, run, again = traj.steps
    assert "same code" not in first.observation and "repeat_of" not in first.info
    # the run of the failed code is told so, with its failure, in place of "submit it"
    assert run.info["repeat_of"] == 1 and "This is the code of your submission 1, which failed" in run.observation
    assert "returned False, expected True" in run.observation and "submit it" not in run.observation
    assert again.info["repeat_of"] == 1 and "same code as your submission 1" in again.observation
    assert "returned False, expected True" in again.observation  # the verdict itself is still given

    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=3,
                                     submission=SubmissionSettings(flag_repeats=False),
                                     redraw=RedrawSettings(repeats=0))).run()
    assert "submit it" in traj.steps[1].observation and "same code" not in traj.steps[2].observation


def test_a_failed_submission_names_the_earlier_run_that_passes_the_examples(smol, humaneval_all):
    _, tok = smol
    task = humaneval_all[0]
    wrong = task.meta["stub"] + "    return False\n"
    # qwen's HumanEval/0: the right code ran, then another body was submitted
    script = [f"```python\n{task.meta['reference']}```\n", f"```python\n{wrong}```\n",
              f"```submit\n{wrong}```\n", "```submit\n```\n", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=5)).run()
    failed, empty = traj.steps[2], traj.steps[3]
    assert failed.info["visible_passed"] is False and failed.info["passing_run"] == 1
    assert "The code of your run 1 passes these examples" in failed.observation
    assert "returned False, expected True" in failed.observation  # after the verdict, not in its place
    assert empty.info["from_last_run"] and empty.argument.strip() == task.meta["reference"].strip()
    assert empty.info["visible_passed"] is True and traj.gold["passed"] is True and len(traj.steps) == 4

    off = CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=5,
                          submission=SubmissionSettings(recall_passing_run=False),
                          redraw=RedrawSettings(repeats=0))
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None, off).run()
    assert "passing_run" not in traj.steps[2].info and "passes these examples" not in traj.steps[2].observation
    assert traj.steps[3].argument.strip() == wrong.strip() and traj.gold["passed"] is False  # the last run

    # only failing code ran: nothing to recall
    script = [f"```python\n{wrong}```\n", f"```submit\n{wrong}```\n", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=3)).run()
    assert "passing_run" not in traj.steps[1].info and "passes these examples" not in traj.steps[1].observation


def test_an_episode_out_of_turns_is_scored_on_the_code_that_last_ran(smol, humaneval_all):
    from eval.code_metrics import code_metrics
    from rewards.code import code_shaped_reward, code_torl_reward

    _, tok = smol
    task = humaneval_all[0]
    ran = [f"```python\n{task.meta['reference']}```\n"] * 2  # qwen's HumanEval/76: runs, never a submission
    traj = CodeAgent(ScriptedPolicy(tok, ran + ["unused"]), task, None,
                     CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=2)).run()
    assert traj.stop_reason == "max_turns" and traj.count("submit") == 0
    assert traj.meta["autosubmitted"] and traj.gold["passed"] is True
    assert traj.answer.strip() == task.meta["reference"].strip()
    metrics = code_metrics([traj])
    assert metrics["submitted"] == 0.0 and metrics["autosubmitted"] == 1.0 and metrics["pass_at_1"] == 1.0
    assert code_shaped_reward(traj).score == -0.1  # the model's own protocol is still read
    assert code_torl_reward(traj).score == 1.0  # the verdict pass@1 scores

    off = CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=2,
                          submission=SubmissionSettings(submit_last_run_at_limit=False))
    traj = CodeAgent(ScriptedPolicy(tok, ran + ["unused"]), task, None, off).run()
    assert not traj.gold.get("passed") and "autosubmitted" not in traj.meta and traj.answer is None

    # a run after a failed submission is the fix being tried: scored at the limit (DataFrameBench's
    # execute, submit, execute, submit, execute), unless it is a failed submission's code again
    wrong = task.meta["stub"] + "    return False\n"
    script = [f"```submit\n{wrong}```\n", ran[0], "unused"]
    cfg = CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=2)
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None, cfg).run()
    assert traj.stop_reason == "max_turns" and traj.count("submit") == 1
    assert traj.meta["autosubmitted"] and traj.gold["passed"] is True
    assert traj.answer.strip() == task.meta["reference"].strip()
    # the reward scores the fix, as pass@1 and the trainer's pass rate do, not the failed submission
    assert code_shaped_reward(traj).score == 1.0 and code_shaped_reward(traj).components["passed"] == 1.0
    assert code_torl_reward(traj).score == 1.0

    again = [f"```submit\n{wrong}```\n", f"```python\n{wrong}```\n", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, again), task, None, replace(cfg,
                                                                     redraw=replace(cfg.redraw, repeats=0))).run()
    assert "autosubmitted" not in traj.meta and traj.gold["passed"] is False and traj.answer.strip() == wrong.strip()
    assert code_shaped_reward(traj).score == 0.0 and code_torl_reward(traj).score == -1.0

    before = [ran[0], f"```submit\n{wrong}```\n", "unused"]  # the run came before the FAIL answer
    traj = CodeAgent(ScriptedPolicy(tok, before), task, None, cfg).run()
    assert "autosubmitted" not in traj.meta and traj.gold["passed"] is False


def test_a_turn_that_repeats_a_failed_submission_is_drawn_again(smol, humaneval_all):
    _, tok = smol
    task = humaneval_all[0]
    wrong = task.meta["stub"] + "    return False\n"
    right = task.meta["reference"]
    # greedy, told the submission failed, runs the same code again; the turn is drawn again (sampled)
    script = [f"```submit\n{wrong}```\n", f"```python\n{wrong}\n\n```\n", f"```submit\n{right}```\n", "unused"]
    policy = ScriptedPolicy(tok, script)
    cfg = CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=3,
                          redraw=RedrawSettings(repeats=2, temperature=0.7))
    traj = CodeAgent(policy, task, None, cfg).run()
    assert [s.action for s in traj.steps] == ["submit", "submit"] and traj.gold["passed"] is True
    assert traj.steps[1].info["redrawn"] == 1 and "repeat_of" not in traj.steps[1].info
    assert "redrawn" not in traj.steps[0].info  # a first failure is no repeat
    assert [s["temperature"] for s in policy.settings] == [0.0, 0.0, 0.7]
    # the draw is seeded by the run's seed, the task, the turn and the draw: a re-run draws it again
    assert [s["seeds"] for s in policy.settings] == [None, None, [draw_seed(0, task.id, 1, 0)]]
    assert len({draw_seed(0, task.id, 1, 0), draw_seed(1, task.id, 1, 0), draw_seed(0, task.id, 2, 0),
                draw_seed(0, task.id, 1, 1), draw_seed(0, "HumanEval/1", 1, 0)}) == 5
    # the redrawn turn's tokens are the sample's, not the rejected draw's
    assert traj.steps[1].completion_ids == tok.encode(script[2], add_special_tokens=False)

    # the draws spent, the repeat is taken and flagged; an empty submit of the failed run is a repeat too
    script = [f"```python\n{wrong}```\n", f"```submit\n{wrong}```\n", "```submit\n```\n",
              f"```python\n{wrong}```\n", f"```submit\n{wrong}```\n", "unused"]
    policy = ScriptedPolicy(tok, script)
    cfg = replace(cfg, redraw=replace(cfg.redraw, temperature=0.9))
    traj = CodeAgent(policy, task, None, cfg).run()
    third = traj.steps[2]
    assert third.info["redrawn"] == 2 and third.info["repeat_of"] == 1 and third.action == "submit"
    assert "same code as your submission 1" in third.observation and traj.gold["passed"] is False
    assert [s["temperature"] for s in policy.settings] == [0.0, 0.0, 0.0, 0.9, 0.9]
    assert [s["seeds"] for s in policy.settings][3:] == [[draw_seed(0, task.id, 2, d)] for d in (0, 1)]

    # off (and in RL rollouts): every turn is taken as drawn
    policy = ScriptedPolicy(tok, [f"```submit\n{wrong}```\n", f"```submit\n{wrong}```\n", "unused"])
    traj = CodeAgent(policy, task, None, replace(cfg, max_turns=2,
                                                 redraw=replace(cfg.redraw, repeats=0))).run()
    assert traj.steps[1].info["repeat_of"] == 1 and "redrawn" not in traj.steps[1].info
    assert len(policy.settings) == 2


def test_a_run_that_repeats_a_run_that_raised_is_drawn_again(smol, humaneval_all):
    _, tok = smol
    task = humaneval_all[0]
    crash = task.meta["stub"] + "    return xs[0]\n\nprint(undefined_name)\n"
    right = task.meta["reference"]
    # the run raised; the same run again is drawn again, and the sample is taken
    script = [f"```python\n{crash}```\n", f"```python\n{crash}\n```\n", f"```submit\n{right}```\n", "unused"]
    policy = ScriptedPolicy(tok, script)
    cfg = CodeAgentConfig(mode="code-only", test_feedback=True, max_turns=3,
                          redraw=RedrawSettings(repeats=2, temperature=0.7))
    traj = CodeAgent(policy, task, None, cfg).run()
    assert "NameError" in traj.steps[0].error
    assert [s.action for s in traj.steps] == ["execute", "submit"] and traj.gold["passed"] is True
    assert traj.steps[1].info["redrawn"] == 1
    assert [s["seeds"] for s in policy.settings] == [None, None, [draw_seed(0, task.id, 1, 0)]]

    # a sample that is no tool call is drawn again; if every draw is one, the repeat is taken (a
    # malformed turn in the context is copied by the greedy turns after it)
    script = [f"```python\n{crash}```\n", f"```python\n{crash}```\n", "python", f"```submit\n{right}```\n"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None, cfg).run()
    assert [s.action for s in traj.steps] == ["execute", "submit"] and traj.steps[1].info["redrawn"] == 2
    script = [f"```python\n{crash}```\n", f"```python\n{crash}```\n", "python", "python", "unused"]
    traj = CodeAgent(ScriptedPolicy(tok, script), task, None, replace(cfg, max_turns=2)).run()
    assert [s.action for s in traj.steps] == ["execute", "execute"] and traj.steps[1].info["redrawn"] == 2
    assert traj.steps[1].info["repeat_of_run"] == 1 and traj.steps[1].completion.startswith("```python")

    # a run that did not raise, run again, is taken (its output may be what the model wants to read)
    fine = task.meta["stub"] + "    return False\n"
    policy = ScriptedPolicy(tok, [f"```python\n{fine}```\n", f"```python\n{fine}```\n", "unused"])
    traj = CodeAgent(policy, task, None, replace(cfg, max_turns=2)).run()
    assert [s.action for s in traj.steps] == ["execute", "execute"] and len(policy.settings) == 2
    assert "redrawn" not in traj.steps[1].info and "repeat_of_run" not in traj.steps[1].info

    # off: the repeat is taken, and marked as the rerun of run 1 (eval's repeated_failed_runs)
    policy = ScriptedPolicy(tok, [f"```python\n{crash}```\n", f"```python\n{crash}```\n", "unused"])
    traj = CodeAgent(policy, task, None, replace(cfg, max_turns=2,
                                                 redraw=replace(cfg.redraw, failed_runs=False))).run()
    assert traj.steps[1].info["repeat_of_run"] == 1 and "redrawn" not in traj.steps[1].info
    assert len(policy.settings) == 2 and "NameError" in traj.steps[1].error
    from eval.code_metrics import code_metrics

    assert code_metrics([traj])["repeated_failed_runs"] == 1


def test_rl_rollouts_take_every_turn_as_drawn():
    from research_agent.tasks import CodeTasks
    from research_agent.train.config import TrainConfig

    cfg = CodeTasks().agent_config(TrainConfig(task_type="code", agent={"mode": "code-only"}))
    assert cfg.redraw.repeats == 0 and cfg.test_feedback is True
