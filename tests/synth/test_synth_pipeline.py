"""QA synthesis on a real small corpus, kill -9 resume of trajectory synthesis, SFT export."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from research_agent.trajectory import Step, Trajectory
from synth.confidence import group_confidences, trajectory_confidence, weighted_vote
from synth.qa import QASynthesizer, SynthesisError
from synth.trajectories import export_sft, filter_trajectories, scan_shards

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def synth(small_browser):
    return QASynthesizer(list(small_browser.documents()), small_browser.chunks, seed=1)


def test_questions_are_verifiable_and_split_by_document(synth, small_browser):
    items, stats = synth.generate()
    assert stats["single_hop"] > 30 and stats["multi_hop"] > 5
    kinds = {i.kind for i in items}
    assert {"capital", "borders-both", "capital-of-bordering", "population-of-capital-country"} <= kinds
    for it in items:
        text = " ".join(small_browser.chunk_text(c) for c in it.supporting)
        assert any(a.lower() in text.lower() for a in it.answers), it
        assert len(it.rubrics) == it.hops
    fr = next(i for i in items if i.question == "What is the capital of France?")
    assert fr.answers == ["Paris"] and fr.supporting[0].startswith("factbook/fr#")
    two = next(i for i in items if i.kind == "capital-of-bordering")
    assert two.rubrics[0]["entity"] != two.answers[0] and two.rubrics[1]["entity"] == two.answers[0]
    # a document's questions all land in the same split (no test fact is trained on)
    by_doc: dict[str, set[str]] = {}
    for it in items:
        if it.hops == 1:
            by_doc.setdefault(it.supporting_docs[0], set()).add(it.split)
    assert all(len(s) == 1 for s in by_doc.values())
    assert len({i.question for i in items}) == len(items)


def test_overlap_guard_drops_evaluation_questions(synth):
    items, _ = synth.generate(exclude=[{"question": "What is the capital of France?", "answers": ["Paris"]}])
    assert not any(i.question == "What is the capital of France?" for i in items)
    assert not any("Paris" in i.answers for i in items)


def test_corpus_without_links_makes_single_hop_only(small_browser):
    from corpus.documents import Document

    docs = [Document(id=d.id, title=d.title, text=d.text, meta=d.meta) for d in small_browser.documents()]
    s = QASynthesizer(docs, small_browser.chunks)
    with pytest.raises(SynthesisError, match="no links"):
        s.multi_hop()
    items, stats = s.generate()
    assert items and stats["multi_hop"] == 0 and "no links" in stats["warnings"][0]


def _traj(answer, logprobs, qid="q", gold="Paris", searched=True):
    steps = ([Step("search", "x", completion_ids=[1] * 3, observation_ids=[2] * 2)] if searched else [])
    steps.append(Step("answer", answer, completion_ids=[1] * (len(logprobs) - 3 * searched)))
    return Trajectory(question="q?", id=qid, gold={"answers": [gold]}, steps=steps, answer=answer,
                      token_ids=[1] * (len(logprobs) + 2 * searched),
                      token_mask=[1] * 3 * searched + [0] * 2 * searched + [1] * (len(logprobs) - 3 * searched),
                      logprobs=logprobs[: 3 * searched] + [0.0] * 2 * searched + logprobs[3 * searched:])


def test_deepconf_statistics_and_vote():
    assert group_confidences([-1, -1, -3, -3], window=2) == [-1, -2, -3]
    sure = _traj("Paris", [-0.1] * 20)
    unsure = _traj("Lyon", [-0.1] * 10 + [-5.0] * 10)
    c = trajectory_confidence(unsure, window=4)
    assert c["lowest_group"] == pytest.approx(-5.0) and c["mean"] < trajectory_confidence(sure)["mean"]
    assert weighted_vote([sure, unsure, _traj("Lyon", [-4.0] * 20)]) == "Paris"
    kept, stats = filter_trajectories([sure, unsure, _traj("Paris", [-0.1] * 5, searched=False)])
    assert kept == [sure] and stats["incorrect"] == 1 and stats["bad_format"] == 1


def test_sft_export_keeps_turns_and_masks_nothing_of_the_teacher(tmp_path):
    t = Trajectory(question="Capital of France?", gold={"answers": ["Paris"]}, answer="Paris", meta={"template": "fast"},
                   steps=[Step("search", "France", completion="<search>France</search>", observation="\n<result>\nP\n</result>\n"),
                          Step("answer", "Paris", completion="<answer>Paris [factbook/fr#0]</answer>")])
    n = export_sft([t], tmp_path / "sft.jsonl")
    rec = json.loads((tmp_path / "sft.jsonl").read_text())
    assert n == 1 and [x["completion"] for x in rec["turns"]] == ["<search>France</search>",
                                                                  "<answer>Paris [factbook/fr#0]</answer>"]
    # the agent's own format: its system prompt, the question, then one assistant stream with the
    # observations inline (tests/synth/test_sft_export_tokens.py checks it renders to the agent's tokens)
    assert [m["role"] for m in rec["messages"]] == ["system", "user", "assistant"]
    assert "<result>\nP\n</result>" in rec["messages"][-1]["content"]


def test_kill_9_then_resume_loses_nothing_and_duplicates_nothing(tmp_path, small_corpus_dir, smol):
    qa = tmp_path / "qa.jsonl"
    countries = ["France", "Spain", "Italy", "Belgium", "Germany"]
    qa.write_text("".join(json.dumps({"id": f"c{i}", "question": f"What is the capital of {c}?", "answers": ["x"],
                                      "split": "train"}) + "\n" for i, c in enumerate(countries)))
    out = tmp_path / "shards"
    cmd = [sys.executable, "-m", "synth", "trajectories", "--qa", str(qa), "--out", str(out), "--model",
           "smollm2-135m", "--corpus", str(small_corpus_dir), "--samples", "2", "--max-turns", "2",
           "--max-new-tokens", "8", "--concurrency", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        shards = list(out.glob("shard-*.jsonl"))
        if shards and sum(len(p.read_bytes().splitlines()) for p in shards) >= 3:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open(next(out.glob("shard-*.jsonl")), "ab") as f:
        f.write(b'{"question": "torn')  # what a kill in the middle of a write leaves
    done_before, dropped = scan_shards(out, repair=False)
    assert 3 <= len(done_before) < 10 and dropped == 1
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = [json.loads(x) for p in sorted(out.glob("shard-*.jsonl")) for x in p.read_text().splitlines()]
    keys = [r["meta"]["key"] for r in lines]
    assert len(keys) == len(set(keys)) == 10  # 5 questions × 2 samples, each exactly once
    assert {r["id"] for r in lines} == {f"c{i}" for i in range(5)}
    for key, traj in done_before.items():  # work done before the kill was kept, not redone
        assert next(r for r in lines if r["meta"]["key"] == key)["token_ids"] == traj.token_ids


def _cited(answer, cited, retrieved, kind="capital", model="m"):
    t = _traj(answer, [-0.1] * 8)
    t.citations, t.retrieved = cited, retrieved
    t.gold["kind"], t.meta["model"] = kind, model
    return t


def test_rejection_sampling_keeps_right_answers_only_when_their_citations_check():
    chunk = {"factbook/fr#0": "The capital of France is Paris."}
    checked = _cited("Paris", ["factbook/fr#0"], chunk)
    lucky = _cited("Paris", [], chunk)                                   # right, cites nothing
    invented = _cited("Paris", ["factbook/xx#9"], chunk)                 # cites a chunk it never saw
    wrong_chunk = _cited("Paris", ["factbook/de#0"], {"factbook/de#0": "The capital of Germany is Berlin."})
    kept, stats = filter_trajectories([checked, lucky, invented, wrong_chunk], require_support=True)
    assert kept == [checked] and stats["unsupported"] == 3
    kept, _ = filter_trajectories([checked, lucky, invented, wrong_chunk])   # without the check all pass
    assert len(kept) == 4


def test_per_kind_cap_draws_the_same_seeded_subset_of_each_teacher_and_kind():
    chunk = {"c#0": "Paris"}
    trajs = [_cited("Paris", ["c#0"], chunk, kind=k, model=m) for m in ("ref", "student")
             for k in ("capital",) * 5 + ("borders-both",) * 2]
    kept, stats = filter_trajectories(trajs, per_kind=3, seed=1)
    groups = {}
    for t in kept:
        groups[(t.meta["model"], t.gold["kind"])] = groups.get((t.meta["model"], t.gold["kind"]), 0) + 1
    assert groups == {("ref", "capital"): 3, ("ref", "borders-both"): 2,
                      ("student", "capital"): 3, ("student", "borders-both"): 2}
    assert stats["over_kind_cap"] == 4
    assert [trajs.index(t) for t in kept] == sorted(trajs.index(t) for t in kept)   # input order kept
    again, _ = filter_trajectories(trajs, per_kind=3, seed=1)
    assert [id(t) for t in again] == [id(t) for t in kept]


def test_the_european_union_is_never_the_country_that_borders_both(small_browser):
    """The EU's profile lists its outer borders; with it among the documents, "the country that borders
    both X and Y" was answered "European Union" (35 of the 191 two-hop test questions)."""
    from corpus.factbook import factbook_documents

    eu = next(factbook_documents(gecs=["ee"]))
    assert eu.links, "the EU's profile should link its border countries, or this test shows nothing"
    docs = [*small_browser.documents(), eu]
    chunks = {d.id: small_browser.chunks(d.id) for d in small_browser.documents()}
    chunks[eu.id] = small_browser.chunks(next(iter(chunks)))[:0]  # no text: the EU can only enter as a bridge
    s = QASynthesizer(docs, lambda i: chunks.get(i, []), seed=1)
    assert eu.id not in s.countries
    items = s.multi_hop()
    assert items and not any(eu.id in i.supporting_docs or "European Union" in i.answers for i in items)


def test_a_trained_student_samples_its_own_two_hop_runs(tmp_path, small_corpus_dir, smol):
    """Round two of rejection sampling: the student with its adapter answers only the questions of at
    least --min-hops hops; the trajectories name the adapter that made them."""
    from synth.__main__ import main as synth_main
    from synth.trajectories import load_trajectories
    from tests.loras import random_lora

    model, _ = smol
    adapter = random_lora(model, tmp_path / "lora", seed=5, std=0.01)
    qa = tmp_path / "qa.jsonl"
    rows = [{"id": "one", "question": "What is the capital of France?", "answers": ["Paris"], "hops": 1},
            {"id": "two", "question": "Which country borders both France and Italy?", "answers": ["Switzerland"],
             "hops": 2, "supporting_docs": ["factbook/sz", "factbook/fr", "factbook/it"]},
            {"id": "eu", "question": "Which country borders both Albania and Moldova?", "answers": ["European Union"],
             "hops": 2, "supporting_docs": ["factbook/ee", "factbook/al", "factbook/md"]}]
    qa.write_text("".join(json.dumps({**r, "split": "train"}) + "\n" for r in rows))
    argv = ["trajectories", "--qa", str(qa), "--model", "smollm2-135m", "--adapter", str(adapter), "--min-hops", "2",
            "--corpus", str(small_corpus_dir), "--samples", "2", "--max-turns", "2", "--max-new-tokens", "8",
            "--temperature", "0.7", "--out", str(tmp_path / "out")]
    assert synth_main(argv) == 0
    trajs = load_trajectories(tmp_path / "out")
    assert sorted(t.id for t in trajs) == ["two", "two"]  # one-hop and ill-posed questions left out
    assert all(t.meta["model"] == f"smollm2-135m+{adapter}" for t in trajs)
    assert synth_main([*argv[:-1], str(tmp_path / "ref"), "--policy", "reference"]) == 2  # no adapter on a script
