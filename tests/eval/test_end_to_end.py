"""A small real eval: SQuAD-format paragraphs written here → indexed with the corpus package →
``python -m eval qa`` with smollm2-135m → results, resume, compare.

smollm2 does not follow the tool format before SFT (DATA.md), so the numbers are not asserted to be
good; what is asserted is that every piece is real and wired: the index is built from the
paragraphs, the model generated tokens, gold passages reached the metrics, and a second run resumes.
"""

from __future__ import annotations

import json

import pytest

from eval.benchmarks import load_benchmark
from eval.cli import main
from eval.corpora import open_benchmark_corpus

SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Nile",
            "paragraphs": [
                {
                    "context": "The Nile is a major north-flowing river in northeastern Africa. It flows into the "
                    "Mediterranean Sea and is about 6,650 km long.",
                    "qas": [
                        {
                            "id": "nile-1",
                            "question": "Into which sea does the Nile flow?",
                            "answers": [{"text": "Mediterranean Sea", "answer_start": 83}],
                        },
                    ],
                }
            ],
        },
        {
            "title": "Kilimanjaro",
            "paragraphs": [
                {
                    "context": "Mount Kilimanjaro is a dormant volcano in Tanzania. It is the highest mountain "
                    "in Africa, about 5,895 metres above sea level.",
                    "qas": [
                        {
                            "id": "kili-1",
                            "question": "In which country is Mount Kilimanjaro?",
                            "answers": [{"text": "Tanzania", "answer_start": 42}],
                        },
                    ],
                }
            ],
        },
        {
            "title": "Sahara",
            "paragraphs": [
                {
                    "context": "The Sahara is a desert spanning North Africa. It is the largest hot desert in the world.",
                    "qas": [
                        {
                            "id": "sahara-1",
                            "question": "What is the largest hot desert in the world?",
                            "answers": [{"text": "The Sahara", "answer_start": 0}],
                        },
                    ],
                }
            ],
        },
    ],
}


@pytest.fixture(scope="module")
def squad_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    bench = root / "dev.json"
    bench.write_text(json.dumps(SQUAD))
    _, spec = load_benchmark("squad-open", path=bench)
    browser = open_benchmark_corpus(spec, index_root=root / "indexes", progress=False)
    hits = browser.search("Kilimanjaro volcano Tanzania", k=3)
    assert hits and hits[0].doc_id == "squad/Kilimanjaro/0", "the paragraphs were indexed as documents"
    return root, bench, browser


@pytest.mark.model
def test_real_eval_resume_and_compare(squad_setup, capsys):
    root, bench, browser = squad_setup
    out = root / "runs" / "smollm2"
    argv = [
        "qa", "--bench", "squad-open", "--bench-file", str(bench), "--limit", "2", "--seed", "0",
        "--corpus", str(browser.path), "--model", "smollm2-135m", "--out", str(out), "--quiet",
        "--set", "max_turns=2", "--set", "max_new_tokens=16", "--concurrency", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    m = results["metrics"]
    assert m["n"] == 2 and m["funnel_n"] == 2, "gold passages known for SQuAD-open"
    assert m["generated_tokens"] > 0 and m["turns"] >= 1 and m["seconds"] > 0
    assert 0.0 <= m["f1"] <= 1.0 and m["answer_rate"] + m["abstain_rate"] == pytest.approx(1.0)
    assert results["model"] == "smollm2-135m" and results["agent_config"]["max_turns"] == 2
    assert results["index_manifest"]["counts"]["documents"] == 3
    assert "torch" in results["versions"]
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    trajs = [json.loads(line) for line in lines]
    assert len(trajs) == 2 and all(t["steps"] and t["gold"]["supporting_docs"] for t in trajs)

    assert main(argv) == 0  # resume: everything already answered, nothing is redone
    again = json.loads((out / "results.json").read_text())
    assert again["n_resumed"] == 2 and again["metrics"] == m
    assert (out / "trajectories.jsonl").read_text().splitlines() == lines

    capsys.readouterr()
    assert main(["compare", str(out), "--out", str(root / "cmp")]) == 0
    assert "smollm2" in capsys.readouterr().out
    assert (root / "cmp" / "funnel.png").read_bytes().startswith(b"\x89PNG")
