"""The reference demonstrations research: one search per hop, the bridge entity read off a real
result before it is searched for, open + find when the snippets do not show the fact, and an
answer only from lines that were shown.  Run over a real corpus (France, Germany and neighbours)
and the question kinds ``synth.qa`` makes of it."""

from __future__ import annotations

import re

import pytest

from synth.reference import KINDS, TWO_HOP


@pytest.fixture(scope="module")
def demos(tmp_path_factory, small_corpus_dir, small_browser):
    from synth.__main__ import main as synth_main
    from synth.qa import QASynthesizer, write_jsonl
    from synth.trajectories import load_trajectories

    items, _ = QASynthesizer(list(small_browser.documents()), small_browser.chunks, seed=0).generate(dev=0, test=0)
    items = [it for it in items if it.kind in KINDS]
    d = tmp_path_factory.mktemp("research-demos")
    write_jsonl(str(d / "qa.jsonl"), items)
    argv = ["trajectories", "--qa", str(d / "qa.jsonl"), "--policy", "reference", "--model", "smollm2-135m",
            "--corpus", str(small_corpus_dir), "--max-turns", "10", "--max-tool-calls", "8",
            "--set", "max_total_tokens=3072", "--concurrency", "4"]
    assert synth_main([*argv, "--out", str(d / "a")]) == 0
    assert synth_main([*argv, "--out", str(d / "b")]) == 0
    assert synth_main([*argv, "--out", str(d / "c"), "--state-bridges"]) == 0
    again = {t.id: [s.completion for s in t.steps] for t in load_trajectories(d / "b")}
    return {it.id: it for it in items}, load_trajectories(d / "a"), again, load_trajectories(d / "c")


def _correct(t) -> bool:
    return t.answered and t.answer.strip() in t.gold["answers"]


def test_answers_only_what_shown_lines_state(demos):
    _, trajs, _, _ = demos
    answered = [t for t in trajs if t.answered and t.answer.strip() != "not found"]
    assert len(answered) >= 0.8 * len(trajs)
    for t in answered:
        assert _correct(t), (t.question, t.answer)
        final = t.steps[-1]
        cites = re.findall(r"\[([^\]\s]+#\d+)\]", final.completion)
        shown = "".join(s.observation for s in t.steps[:-1])
        assert cites and all(f"[{c}]" in shown or f"{c}]:" in shown for c in cites), final.completion
        assert t.answer.strip().lower() in shown.lower()  # the evidence came before the answer


def test_two_hop_questions_search_for_the_bridge_after_reading_it(demos):
    items, trajs, _, _ = demos
    bridged = 0
    for t in trajs:
        kind = items[t.id].kind
        if kind not in TWO_HOP or not _correct(t):
            continue
        if kind == "borders-both":  # one search for the pair may show a line naming all three
            continue
        searches = [s for s in t.steps if s.action == "search"]
        assert len(searches) >= 2, [s.completion for s in t.steps]
        bridge = items[t.id].rubrics[0]["entity"]  # the country the second hop is about
        if bridge in t.question:  # Luxembourg, the country whose capital is Luxembourg
            continue
        first = next(i for i, s in enumerate(t.steps) if s.action == "search" and bridge in s.argument)
        assert any(bridge in s.observation for s in t.steps[:first]), "searched for the bridge before it was shown"
        bridged += 1
    assert bridged >= 3


def test_opens_a_shown_document_and_finds_the_line(demos):
    items, trajs, _, _ = demos
    opened = 0
    for t in trajs:
        for i, s in enumerate(t.steps):
            if s.action != "open":
                continue
            opened += 1
            assert any(f"[{s.argument}#" in p.observation for p in t.steps[:i]), "opened a document no result named"
            assert t.steps[i + 1].action == "find" and t.steps[i + 1].info["matches"]
    assert opened >= 2
    assert {items[t.id].kind for t in trajs if t.count("find")} & set(TWO_HOP)


def test_demonstrations_are_deterministic_and_vary_their_wording(demos):
    _, trajs, again, _ = demos
    assert {t.id: [s.completion for s in t.steps] for t in trajs} == again
    first = {re.sub(r"\b[A-Z][\w'-]*(?: [A-Z][\w'-]*)*", "X", t.steps[0].argument) for t in trajs}
    assert len(first) >= 4  # several query wordings, not one template


def test_stated_bridges_name_the_bridge_in_a_thought_before_the_turn_that_uses_it(demos):
    """--state-bridges changes no move: the same searches, opens and answers, with the bridge the
    script read written in a <think> at the start of the next hop (or of a borders-both answer)."""
    items, trajs, _, stated = demos
    plain = {t.id: t for t in trajs}
    said = 0
    for t in stated:
        assert [(s.action, s.argument) for s in t.steps] == [(s.action, s.argument) for s in plain[t.id].steps]
        kind = items[t.id].kind
        thoughts = [(i, s.info["thought"]) for i, s in enumerate(t.steps) if s.info.get("thought")]
        if kind not in TWO_HOP:
            assert not thoughts
            continue
        if not _correct(t):  # a bridge found, the second hop not: stated, then "not found"
            continue
        (i, thought), = thoughts  # one bridge, stated once
        bridge = items[t.id].rubrics[0]["entity"]
        assert bridge in thought and bridge in t.steps[i].completion.split("</think>")[1] + t.answer
        assert any(bridge in s.observation for s in t.steps[:i])  # stated only after a result showed it
        assert t.steps[i].completion.startswith("<think>") and t.steps[i].action in ("search", "answer")
        assert len(t.steps[i].completion_ids) <= 48  # fits the research budget's turn length
        said += 1
    assert said >= 3


def test_items_without_a_kind_keep_the_single_search_fallback(small_browser):
    from transformers import AutoTokenizer

    from research_agent.agent import AgentConfig, run_batch
    from research_agent.inference.models import resolve_model_dir
    from synth.reference import ReferencePolicy

    item = {"id": "x", "question": "What is the capital of France?", "answers": ["Paris"]}
    # a kind the scripts know, but without the documents they name by position (a hand-made task file)
    border = {"id": "y", "question": "Which country borders both Spain and Belgium?", "answers": ["France"],
              "kind": "borders-both"}
    policy = ReferencePolicy(AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m")), [item, border])
    t, b = run_batch([item, border], policy, small_browser, AgentConfig(), progress=False)
    assert t.steps[0].completion == "<search>What is the capital of France?</search>"
    assert t.answer.strip() == "Paris"
    assert b.steps[0].completion == f"<search>{border['question']}</search>"
