"""One small real corpus for the whole session: HTML pages with boilerplate, Markdown, text, JSONL,
a handful of Factbook countries, and a few bad files that must be skipped.  It is embedded with the
real packaged all-MiniLM-L6-v2 and indexed with real FAISS and bm25s."""

from __future__ import annotations

import contextlib
import io
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus_sources import FACTBOOK_GECS, write_sources


@dataclass
class SmallCorpus:
    path: Path
    src: Path
    manifest: dict
    stderr: str


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> SmallCorpus:
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    src = tmp_path_factory.mktemp("sources")
    write_sources(src)
    out = tmp_path_factory.mktemp("index") / "corpus"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        manifest = build_corpus([src], out, documents=list(factbook_documents(FACTBOOK_GECS)), progress=False)
    return SmallCorpus(path=out, src=src, manifest=manifest, stderr=err.getvalue())


@pytest.fixture(scope="session")
def browser(small_corpus):
    from corpus import open_corpus

    return open_corpus(small_corpus.path)


@pytest.fixture
def corpus_copy(small_corpus, tmp_path) -> Path:
    """A private copy of the small corpus, to damage or extend."""
    dest = tmp_path / "copy"
    shutil.copytree(small_corpus.path, dest)
    return dest
