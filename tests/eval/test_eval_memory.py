"""``python -m eval qa --memory``: case memory guidance reaches each question; results can be added."""

from __future__ import annotations

import json

from eval.benchmarks import CorpusSpec
from research_agent.memory import Case, CaseMemory

CASES = [
    Case("What is the capital of France?", ["search: capital of France"], "Paris", True, "correct", 1.0),
    Case("What currency does Spain use?", ["search: Spain currency"], "peso", False, "wrong", 0.0),
]


def test_eval_qa_reads_the_memory_and_can_add_its_results(scripted, make_items, tmp_path, monkeypatch, capsys):
    from eval import cli

    mem = tmp_path / "mem"
    CaseMemory(mem).add(CASES)
    items = make_items(2) + [{"id": "fr", "question": "Which city is France's capital?", "answers": ["Paris"]}]
    monkeypatch.setattr(cli, "load_benchmark", lambda *a, **k: (items, CorpusSpec()))
    monkeypatch.setattr("eval.corpora.open_benchmark_corpus", lambda *a, **k: None)
    monkeypatch.setattr("research_agent.inference.policy.load_policy", lambda *a, **k: None)
    argv = ["qa", "--bench", "x.jsonl", "--out", str(tmp_path / "run"), "--memory", str(mem), "--memory-add", "--quiet"]
    assert cli.main(argv) == 0
    assert "warning" not in capsys.readouterr().err
    assert "Answer: Paris" in scripted.guidance["fr"] and scripted.guidance["q0"] == ""
    assert len(CaseMemory(mem)) == len(CASES) + 3
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["memory"] == str(mem.resolve())


def test_eval_questions_already_in_the_memory_are_warned_about(scripted, tmp_path, monkeypatch, capsys):
    from eval import cli

    mem = tmp_path / "mem"
    CaseMemory(mem).add(CASES)
    items = [{"id": "fr", "question": "What is the capital of France?", "answers": ["Paris"]}]
    monkeypatch.setattr(cli, "load_benchmark", lambda *a, **k: (items, CorpusSpec()))
    monkeypatch.setattr("eval.corpora.open_benchmark_corpus", lambda *a, **k: None)
    monkeypatch.setattr("research_agent.inference.policy.load_policy", lambda *a, **k: None)
    assert cli.main(["qa", "--bench", "x.jsonl", "--out", str(tmp_path / "run"), "--memory", str(mem), "--quiet"]) == 0
    assert "1 of 1 questions are already in the memory" in capsys.readouterr().err
    assert scripted.guidance["fr"] == ""  # its own case (with its gold) is never shown


def test_yes_no_questions_are_told_their_answer_format(scripted, make_items, tmp_path, monkeypatch, capsys):
    from eval import cli

    items = make_items(1) + [{"id": "b", "question": "Is Paris in France?", "answers": ["yes"],
                              "answer_type": "boolean"}]
    monkeypatch.setattr(cli, "load_benchmark", lambda *a, **k: (items, CorpusSpec()))
    monkeypatch.setattr("eval.corpora.open_benchmark_corpus", lambda *a, **k: None)
    monkeypatch.setattr("research_agent.inference.policy.load_policy", lambda *a, **k: None)
    mem = tmp_path / "mem"
    CaseMemory(mem).add(CASES)
    out = tmp_path / "run"
    assert cli.main(["qa", "--bench", "x.jsonl", "--out", str(out), "--memory", str(mem), "--quiet"]) == 0
    assert scripted.guidance["b"].endswith("the answer must be yes or no.")
    assert "yes or no" not in scripted.guidance["q0"]
    assert json.loads((out / "run.json").read_text())["format_hints"] is True
    # a run made without the hints is another experiment: no resuming into it
    old = json.loads((out / "run.json").read_text())
    old.pop("format_hints")
    (out / "run.json").write_text(json.dumps(old))
    assert cli.main(["qa", "--bench", "x.jsonl", "--out", str(out), "--memory", str(mem), "--quiet"]) == 2
    assert "format_hints" in capsys.readouterr().err
