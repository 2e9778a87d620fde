"""The unchanged agent graph answering through the live backend (loopback Tavily + real HTML pages)."""

from __future__ import annotations

from research_agent.agent import AgentConfig, ResearchAgent
from tests.doubles import ScriptedPolicy as _Scripted


def ScriptedPolicy(tokenizer, turns):  # noqa: N802
    return _Scripted(tokenizer, turns, logprob=0.0)


def test_agent_answers_through_the_live_backend_and_replays_identically(live, web, smol, tmp_path):
    _, tok = smol
    url = web.page_url("kestrel")
    turns = ["<search>kestrel bird of prey</search>", f"<open>{url}</open>", "<find>falcon</find>",
             f"<answer>a falcon [{url}#1]</answer>"]
    rec = tmp_path / "rec"
    agent = ResearchAgent(ScriptedPolicy(tok, turns), live(record_dir=rec), AgentConfig(max_tool_calls=5))
    traj = agent.run("What family does the kestrel belong to?")
    assert [s.action for s in traj.steps] == ["search", "open", "find", "answer"]
    assert traj.steps[0].info["doc_ids"][0] == url
    assert "cookies" not in traj.steps[1].observation  # boilerplate stripped by trafilatura
    assert "falcon" in traj.steps[2].observation
    assert traj.steps[-1].info["unretrieved"] == []  # the cited page was really read
    calls = web.count("")
    replayed = ResearchAgent(ScriptedPolicy(tok, turns), live(replay_dir=rec), AgentConfig(max_tool_calls=5)).run(
        "What family does the kestrel belong to?")
    assert web.count("") == calls  # replay made no network call
    assert [s.observation for s in replayed.steps] == [s.observation for s in traj.steps]
