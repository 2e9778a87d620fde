"""The SFT export carries what the agent ran: the student's token stream, its mask, and chat messages
that render to it; real scripted episodes over the small Factbook corpus, the real smollm2 tokenizer."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from research_agent import prompts
from research_agent.agent import AgentConfig, ResearchAgent
from research_agent.tasks import render_examples
from synth.__main__ import main as synth_main
from synth.export import IGNORE_INDEX, chat_ids
from synth.trajectories import export_sft, load_trajectories, synthesize_trajectories
from tests.doubles import ScriptedPolicy

SCRIPTS = {
    "France": ["<search>capital of France</search>", "<open>factbook/fr</open>", "<find>Capital</find>",
               "<answer>Paris [factbook/fr#0]</answer>"],
    "Spain": ["<search>capital of Spain</search>", "<answer>Madrid [factbook/sp#0]</answer>"],
}
ANSWERS = {"France": "Paris", "Spain": "Madrid"}


def _question(country: str) -> str:
    return f"What is the capital of {country}?"


@pytest.fixture(scope="module")
def exported(tmp_path_factory, smol, small_browser):
    """Scripted teacher episodes written as shards, then `python -m synth sft-export` (the student's tokenizer)."""
    _, tok = smol
    tmp = tmp_path_factory.mktemp("export")
    policy = ScriptedPolicy(tok, by_key={f"Question: {_question(c)}": list(t) for c, t in SCRIPTS.items()},
                            strict=True)
    items = [{"id": c, "question": _question(c), "answers": [ANSWERS[c]]} for c in SCRIPTS]
    synthesize_trajectories(items, policy, small_browser, tmp / "shards", concurrency=1, progress=False,
                            config=AgentConfig(max_tool_calls=5))
    assert synth_main(["sft-export", "--trajectories", str(tmp / "shards"), "--out", str(tmp / "sft.jsonl"),
                       "--tokenizer", "smollm2-135m"]) == 0
    trajs = {t.id: t for t in load_trajectories(tmp / "shards")}
    records = [json.loads(x) for x in (tmp / "sft.jsonl").read_text().splitlines()]
    return tok, trajs, records


def test_ids_and_mask_are_the_agents_own_stream_when_the_student_is_the_teacher(exported):
    tok, trajs, records = exported
    assert sorted(r["id"] for r in records) == sorted(SCRIPTS)
    for r in records:
        t = trajs[r["id"]]
        t.check_consistency()
        assert r["tokenizer"] == "smollm2-135m"
        assert r["prompt_ids"] == t.prompt_ids and r["completion_ids"] == t.token_ids
        assert r["completion_mask"] == t.token_mask
        # TRL's pre-tokenized fields: the whole stream, the loss on the model's tokens only
        assert r["input_ids"] == t.prompt_ids + t.token_ids
        assert r["labels"] == [IGNORE_INDEX] * len(t.prompt_ids) + [
            i if m else IGNORE_INDEX for i, m in zip(t.token_ids, t.token_mask, strict=True)]
        # our own trainer renders the same record to the same example (the old `turns` field still read)
        assert r["turns"] == [{"completion": s.completion, "observation": s.observation} for s in t.steps]
        cfg = SimpleNamespace(template=None, max_total_tokens=2048)  # the trainer's fields render_examples reads
        assert render_examples(tok, r, cfg) == [(r["input_ids"], [0] * len(r["prompt_ids"]) + r["completion_mask"])]


def test_messages_render_through_the_chat_template_to_the_same_ids(exported):
    tok, trajs, records = exported
    for r in records:
        t, msgs = trajs[r["id"]], r["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
        assert msgs[0]["content"] == prompts.system_prompt("fast")
        assert msgs[1]["content"] == prompts.QUESTION.format(question=t.question)
        opening = tok.apply_chat_template(msgs[:2], add_generation_prompt=True, tokenize=True)
        assert list(getattr(opening, "input_ids", opening)) == r["prompt_ids"]
        assert chat_ids(tok, msgs) == r["input_ids"] and r["messages_round_trip"] is True
        # the spans mark which text of the one assistant message is trained: exactly the mask
        spans = r["assistant_spans"]
        assert "".join(s["text"] for s in spans) == msgs[2]["content"]
        assert [s["text"] for s in spans if s["train"]] == [s.completion for s in t.steps]
        assert [s["text"] for s in spans if not s["train"]] == [s.observation for s in t.steps if s.observation]
        mask = sum(([int(s["train"])] * len(tok.encode(s["text"], add_special_tokens=False)) for s in spans), [])
        assert mask == r["completion_mask"]


def test_the_templates_end_of_turn_is_the_one_thing_a_closed_message_adds(exported):
    """Rendered as a finished conversation the assistant message gets SmolLM2's `<|im_end|>\\n`,
    which the agent never appends (its turns end at a stop string, an EOS is cut): continue it instead."""
    tok, _, records = exported
    r = records[0]
    closed = tok.apply_chat_template(r["messages"], tokenize=False)
    assert closed == tok.decode(r["input_ids"]) + "<|im_end|>\n"


def test_whitespace_at_a_boundary_round_trips_as_text_but_not_as_ids(smol, small_browser, tmp_path):
    """Tokenizing the rendered chat at once lets BPE merge across the prompt/turn boundary ("\\n" + "  <"),
    while the agent tokenized each part on its own: the text is equal, the ids are not, and the record says so."""
    _, tok = smol
    policy = ScriptedPolicy(tok, ["  <search>capital of France</search>", "<answer>Paris [factbook/fr#0]</answer>"])
    t = ResearchAgent(policy, small_browser.fork()).run(_question("France"), gold={"answers": ["Paris"]})
    export_sft([t], tmp_path / "sft.jsonl", tokenizer=tok, tokenizer_name="smollm2-135m")
    r = json.loads((tmp_path / "sft.jsonl").read_text())
    assert r["input_ids"] == t.prompt_ids + t.token_ids and r["completion_mask"] == t.token_mask
    rendered = chat_ids(tok, r["messages"])
    assert r["messages_round_trip"] is False and rendered != r["input_ids"]
    assert tok.decode(rendered) == tok.decode(r["input_ids"])
    assert rendered[: len(t.prompt_ids) - 1] == t.prompt_ids[:-1]  # the prompt's last "\n" merged with the spaces


def test_managed_context_exports_one_example_per_step_as_the_agent_saw_it(smol, small_browser, tmp_path):
    _, tok = smol
    cfg = AgentConfig(context="managed", context_tokens=600, notes_tokens=24, max_new_tokens=64, max_tool_calls=5)
    policy = ScriptedPolicy(tok, ["<notes>nothing yet</notes><search>capital of France</search>",
                                  "<notes>Paris [factbook/fr#0]</notes><open>factbook/fr</open>",
                                  "<answer>Paris [factbook/fr#0]</answer>"], strict=True)
    t = ResearchAgent(policy, small_browser.fork(), cfg).run(_question("France"), gold={"answers": ["Paris"]})
    assert t.managed and t.answered
    export_sft([t], tmp_path / "sft.jsonl", tokenizer=tok, tokenizer_name="smollm2-135m")
    r = json.loads((tmp_path / "sft.jsonl").read_text())
    assert r["context"] == "managed" and "messages" not in r and "input_ids" not in r
    assert [e["prompt_ids"] for e in r["examples"]] == [s.prompt_ids for s in t.steps]
    assert [e["completion_ids"] for e in r["examples"]] == [s.completion_ids for s in t.steps]
    for e in r["examples"]:
        assert e["completion_mask"] == [1] * len(e["completion_ids"])
        assert e["input_ids"] == e["prompt_ids"] + e["completion_ids"]
        assert e["labels"] == [IGNORE_INDEX] * len(e["prompt_ids"]) + e["completion_ids"]


def test_without_a_tokenizer_the_export_is_text_only(exported, tmp_path):
    _, trajs, _ = exported
    export_sft(list(trajs.values()), tmp_path / "sft.jsonl")
    for r in map(json.loads, (tmp_path / "sft.jsonl").read_text().splitlines()):
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        assert not {"prompt_ids", "completion_ids", "input_ids", "labels", "tokenizer"} & set(r)
