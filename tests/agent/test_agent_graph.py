"""The LangGraph agent over a real small corpus: tool nodes, limits, token masks, citations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from research_agent.actions import parse_action
from research_agent.agent import AgentConfig, ResearchAgent, run_batch
from research_agent.inference.policy import BatchingPolicy, LocalPolicy
from tests.doubles import ScriptedPolicy


def test_scripted_run_uses_every_tool_and_keeps_a_consistent_token_stream(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, [
        "<search>capital of France</search>",
        "<open>factbook/fr</open>",
        "<find>Capital</find>",
        "<answer>Paris [factbook/fr#0]</answer>",
    ])
    agent = ResearchAgent(policy, small_browser.fork(), AgentConfig(max_tool_calls=5))
    traj = agent.run("What is the capital of France?", gold={"answers": ["Paris"]})
    assert [s.action for s in traj.steps] == ["search", "open", "find", "answer"]
    assert traj.answer == "Paris" and traj.citations == ["factbook/fr#0"]
    assert "factbook/fr" in traj.steps[0].info["doc_ids"]
    assert traj.steps[1].info["doc_id"] == "factbook/fr"
    assert "Capital: Paris" in traj.steps[2].observation
    assert "factbook/fr#0" in traj.retrieved
    # the citation is real and the claim is supported by the cited text
    assert traj.steps[-1].info["unretrieved"] == []
    assert traj.steps[-1].info["support_rate"] == 1.0
    traj.check_consistency()
    # each turn's prompt is exactly the previous prompt + completion + observation
    for i in range(1, len(policy.prompts)):
        prev, s = policy.prompts[i - 1], traj.steps[i - 1]
        assert policy.prompts[i] == prev + s.completion_ids + s.observation_ids
    # the mask marks exactly the model's tokens
    model_tokens = [t for t, m in zip(traj.token_ids, traj.token_mask, strict=True) if m]
    assert model_tokens == sum((s.completion_ids for s in traj.steps), [])


def test_fabricated_citation_is_flagged(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["<search>capital of Spain</search>", "<answer>Madrid [factbook/xx#9]</answer>"])
    traj = ResearchAgent(policy, small_browser.fork()).run("What is the capital of Spain?")
    assert traj.steps[-1].info["unretrieved"] == ["factbook/xx#9"]
    assert traj.steps[-1].info["support_rate"] == 0.0


def test_tool_cap_tells_the_model_to_answer_and_turn_limit_ends_the_run(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["<search>France</search>"] * 10)
    cfg = AgentConfig(max_tool_calls=2, max_turns=4)
    traj = ResearchAgent(policy, small_browser.fork(), cfg).run("Where is France?")
    assert traj.stop_reason == "max_turns" and traj.answer is None
    assert len(traj.steps) == 4
    assert "no tool calls left" in traj.steps[1].observation  # the 2nd call used the last one
    assert traj.steps[2].info.get("refused") and traj.steps[3].info.get("refused")
    traj.check_consistency()


def test_malformed_output_becomes_an_observation_not_a_crash(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["Let me think about it", "<search></search>", "<answer>Paris</answer>"])
    traj = ResearchAgent(policy, small_browser.fork()).run("What is the capital of France?")
    assert [s.valid for s in traj.steps] == [False, False, True]
    assert "Invalid action" in traj.steps[0].observation
    assert traj.has_void_turn and traj.answer == "Paris"


def test_unknown_document_is_reported_to_the_model(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["<open>factbook/nowhere</open>", "<answer>x</answer>"])
    traj = ResearchAgent(policy, small_browser.fork()).run("Open a missing page")
    assert traj.steps[0].error and "Error:" in traj.steps[0].observation


def test_real_model_run_is_complete_and_bounded(smol, small_browser):
    model, tok = smol
    cfg = AgentConfig(max_turns=3, max_new_tokens=24)
    traj = ResearchAgent(LocalPolicy(model, tok, "smollm2-135m"), small_browser.fork(), cfg).run(
        "What is the capital of Germany?")
    assert 1 <= traj.turns <= 3
    assert traj.stop_reason in ("answer", "max_turns", "max_tokens")
    traj.check_consistency()
    for s in traj.steps:
        assert len(s.completion_ids) == len(s.completion_logprobs) > 0
        assert all(lp <= 0.0 for lp in s.completion_logprobs)


def test_run_batch_merges_concurrent_generations(smol, small_browser):
    model, tok = smol
    policy = BatchingPolicy(LocalPolicy(model, tok, "smollm2-135m"), max_batch=8, wait_s=0.2)
    items = [{"id": f"q{i}", "question": f"What is the capital of {c}?", "answers": [a]}
             for i, (c, a) in enumerate([("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"),
                                         ("Belgium", "Brussels")])]
    trajs = run_batch(items, policy, small_browser, AgentConfig(max_turns=2, max_new_tokens=16), progress=False)
    assert [t.id for t in trajs] == ["q0", "q1", "q2", "q3"]
    assert policy.calls < sum(t.turns for t in trajs)  # several trajectories shared a generate call
    assert trajs[0].gold["answers"] == ["Paris"]


def test_empty_question_is_rejected(smol, small_browser):
    _, tok = smol
    with pytest.raises(ValueError, match="empty"):
        ResearchAgent(ScriptedPolicy(tok, []), small_browser).run("   ")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises_on_arbitrary_text(text):
    a = parse_action(text)
    assert a.name in ("search", "open", "find", "answer", "invalid")
    assert a.valid == (a.name != "invalid")
    if a.valid:
        assert a.argument


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["search", "open", "find", "answer"]), st.text(min_size=1, max_size=50),
       st.text(max_size=30), st.text(max_size=30))
def test_parser_finds_the_action_inside_noise(tag, arg, before, after):
    arg = arg.replace("<", "").replace(">", "").replace("[", "").replace("]", "")
    before = before.replace("<", "")
    a = parse_action(f"{before}<{tag}>{arg}</{tag}>{after}")
    if arg.strip():
        assert a.name == tag
        if tag != "answer":
            assert a.argument == arg.strip()
    else:
        assert a.name == "invalid"


def test_parser_handles_known_malformations():
    assert parse_action("<search>x").reason == "an action tag was opened but never closed"
    assert parse_action("<answer>Paris [factbook/fr#0]", finished=True).argument == "Paris"
    assert parse_action("<answer>Paris [factbook/fr#0]", finished=True).citations == ["factbook/fr#0"]
    assert parse_action("").reason == "the output was empty"
    assert parse_action("<search>a</search><answer>b</answer>").name == "search"
    assert parse_action("<think>hmm</think><open>[wiki/Paris#0]</open>").argument == "wiki/Paris#0"


class _SlowScripted(ScriptedPolicy):
    """Each generate call takes a moment, so an interrupt lands while episodes are in flight."""

    def generate(self, prompts, **kw):
        import time

        time.sleep(0.3)
        return super().generate(prompts, **kw)


def test_an_interrupt_drops_episodes_not_started_and_hands_over_those_in_flight(smol, small_browser):
    """Ctrl-C or the recipe's --stop-after: finished work reaches on_result (so a resume keeps it)."""
    _, tok = smol
    items = [{"id": f"q{i}", "question": "What is the capital of France?"} for i in range(12)]
    seen: list[str] = []

    def on_result(traj):
        seen.append(traj.id)
        if len(seen) == 1:
            raise KeyboardInterrupt

    policy = _SlowScripted(tok, default="<answer>Paris</answer>")
    with pytest.raises(KeyboardInterrupt):
        run_batch(items, policy, small_browser, AgentConfig(max_turns=1), progress=False, concurrency=2,
                  on_result=on_result)
    assert 2 <= len(seen) <= 4 and len(set(seen)) == len(seen)   # the one in flight was handed over
    assert len(policy.prompts) < len(items)                       # the rest never started
