"""The default corpus on a fresh machine: chunks + BM25 first, searched at once, the dense index
built by a real detached background process; a killed build leaves a usable BM25 corpus and the
next open finishes it; the finished corpus searches as a one-phase build does."""

from __future__ import annotations

import json
import re
import time

import pytest

from corpus import build_corpus, open_corpus
from corpus.browser import QueryError
from corpus.factbook import factbook_documents
from corpus.staged import BACKGROUND, build_dense, build_sparse
from corpus.store import DENSE, MANIFEST, CorpusError, build_running, dense_log_path, read_manifest

GECS = ["mn", "an"]  # Monaco and Andorra: 37 chunks, embedded in a few seconds
QUERIES = ["capital of Monaco", "Andorra population", "mountains between France and Spain", "currency"]


@pytest.fixture
def default_dir(tmp_path, monkeypatch):
    """RESEARCH_AGENT_CORPUS points at an unbuilt directory whose default preset is two profiles."""
    import corpus.build

    out = tmp_path / "default"
    monkeypatch.setenv("RESEARCH_AGENT_CORPUS", str(out))
    monkeypatch.setattr(
        corpus.build, "preset_documents", lambda preset, quiet=False: factbook_documents(GECS)
    )
    monkeypatch.setattr(corpus.build, "preset_source_hashes", lambda preset, quiet=False: {})
    yield out
    proc = BACKGROUND.pop(out, None)  # never leave a build behind
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        proc.wait(timeout=30)


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _ranking(browser, mode: str) -> list[list[tuple[str, float]]]:
    return [[(h.chunk_id, h.score) for h in browser.search(q, k=5, mode=mode)] for q in QUERIES]


def test_first_open_answers_from_bm25_while_a_background_process_builds_the_dense_index(
    default_dir, capsys, tmp_path
):
    browser = open_corpus()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"answering from BM25 while the dense index builds in the background \(pid \d+, log .+\); "
        r"later runs use hybrid search",
        line,
    ), line
    proc = BACKGROUND[default_dir]
    assert f"pid {proc.pid}" in line and str(dense_log_path(default_dir)) in line
    assert browser.retriever == "bm25"
    assert browser.search("capital of Monaco", k=1)[0].doc_id == "factbook/mn"
    with pytest.raises(QueryError, match="dense index .* is"):
        browser.search("capital of Monaco", mode="dense")
    manifest = read_manifest(default_dir, dense_pending_ok=True)
    assert manifest["index"]["dense_status"] == "building"
    with pytest.raises(CorpusError, match="dense index .* not built yet|being built"):
        read_manifest(default_dir)  # tools that need the dense index are told why

    # kill the build while it holds the lock: the corpus stays a usable BM25 corpus
    _wait(lambda: build_running(default_dir))
    with pytest.raises(CorpusError, match="dense index of the corpus .* is being built in the background"):
        open_corpus(retriever="dense")
    proc.kill()
    proc.wait(timeout=30)
    assert not (default_dir / DENSE).exists()
    assert not list(default_dir.glob(".*tmp*"))
    again = open_corpus()
    assert again.retriever == "bm25"
    assert again.search("Andorra population", k=1)[0].doc_id == "factbook/an"
    rerun = BACKGROUND[default_dir]
    assert rerun.pid != proc.pid
    capsys.readouterr()

    # a second open while it runs starts no second build
    _wait(lambda: build_running(default_dir) or rerun.poll() is not None)
    if rerun.poll() is None:
        open_corpus()
        assert "another process is building it" in capsys.readouterr().err
        assert BACKGROUND[default_dir] is rerun
        print("checked a second open")

    full = tmp_path / "full"  # a one-phase build to compare with, made while the rerun embeds
    build_corpus(out=full, documents=list(factbook_documents(GECS)), progress=False)
    assert rerun.wait(timeout=120) == 0, dense_log_path(default_dir).read_text()
    assert "done at" in dense_log_path(default_dir).read_text()
    capsys.readouterr()
    hybrid = open_corpus()
    assert capsys.readouterr().err == ""
    assert hybrid.retriever == "hybrid"
    manifest = json.loads((default_dir / MANIFEST).read_text())
    assert "dense_status" not in manifest["index"] and manifest["embedder"]["dim"] == 384
    assert manifest["build"]["embed_seconds"] > 0

    # the same corpus as a one-phase build: every mode ranks alike, score for score
    reference = open_corpus(full)
    for mode in ("hybrid", "dense", "bm25"):
        assert _ranking(hybrid, mode) == _ranking(reference, mode), mode


def test_dense_on_a_corpus_without_its_dense_index_is_a_clear_error(tmp_path):
    out = tmp_path / "c"
    build_sparse(out, documents=factbook_documents(GECS), progress=False)
    with pytest.raises(CorpusError, match=r"dense index .* not built yet .* python -m corpus\.staged"):
        open_corpus(out, retriever="dense", build_if_missing=False)
    browser = open_corpus(out, build_if_missing=False)
    assert browser.retriever == "bm25" and not BACKGROUND.get(out)
    assert browser.search("capital of Monaco", k=1)[0].doc_id == "factbook/mn"


def test_a_bm25_caller_does_not_start_the_dense_build(tmp_path):
    """An eval on BM25 (eval code --retriever bm25, gpu_check --bm25-only) must not share its cores
    with an embedder it will never use; a hybrid caller still starts it."""
    out = tmp_path / "c"
    build_sparse(out, documents=factbook_documents(GECS), progress=False)
    browser = open_corpus(out, retriever="bm25")
    assert browser.retriever == "bm25" and not BACKGROUND.get(out)
    assert not dense_log_path(out).exists()
    assert browser.search("capital of Monaco", k=1)[0].doc_id == "factbook/mn"


def test_a_bm25_only_corpus_starts_no_dense_build_and_can_still_get_one(tmp_path):
    """Built BM25-only on purpose (gpu_check --bm25-only): every open, hybrid included, searches BM25
    and starts nothing; dense is a clear error; ``python -m corpus.staged`` can still add the index."""
    out = tmp_path / "c"
    build_corpus(
        out=out, documents=list(factbook_documents(GECS)), dense=False, dense_later=False, progress=False
    )
    assert json.loads((out / MANIFEST).read_text())["index"]["dense_status"] == "none"
    browser = open_corpus(out)  # hybrid asked for
    assert browser.retriever == "bm25" and not BACKGROUND.get(out) and not dense_log_path(out).exists()
    assert browser.search("capital of Monaco", k=1)[0].doc_id == "factbook/mn"
    with pytest.raises(
        CorpusError, match=r"built without a dense index \(BM25 only\).*python -m corpus\.staged"
    ):
        open_corpus(out, retriever="dense")
    with pytest.raises(QueryError, match="BM25 only"):
        browser.search("capital of Monaco", mode="dense")
    with pytest.raises(CorpusError, match="BM25 only"):
        read_manifest(out)
    build_dense(out, progress=False)
    hybrid = open_corpus(out)
    assert hybrid.retriever == "hybrid" and (out / DENSE).exists()
    assert hybrid.search("capital of Monaco", k=1, mode="dense")[0].doc_id == "factbook/mn"
