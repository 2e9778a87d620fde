"""The corpus a benchmark is answered from, built once and reused.

Benchmarks that ship their own passages (SQuAD-open) are indexed with the corpus package into the
cache, under a directory named by the content fingerprint of their documents: the same paragraphs
are never embedded twice, and changed paragraphs can never be served from a stale index.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from corpus.files import cache_dir
from corpus.store import MANIFEST
from eval.benchmarks import CorpusSpec


def benchmark_index_dir(spec: CorpusSpec, root: Path | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec.name).strip("_") or "corpus"
    return (root or cache_dir() / "eval-corpora") / f"{slug}-{spec.fingerprint}"


def open_benchmark_corpus(
    spec: CorpusSpec,
    corpus_path: str | Path | None = None,
    retriever: str = "hybrid",
    index_root: Path | None = None,
    progress: bool = True,
) -> Any:
    """A Browser for the benchmark: an explicit ``corpus_path`` wins, then the benchmark's own
    documents (built on first use), then the embedded default corpus."""
    from corpus import open_corpus

    if corpus_path is not None:
        return open_corpus(str(corpus_path), retriever=retriever)
    if spec.is_default:
        return open_corpus(None, retriever=retriever)
    out = benchmark_index_dir(spec, index_root)
    if not (out / MANIFEST).exists():
        _build_once(spec, out, progress)
    return open_corpus(str(out), retriever=retriever)


def _build_once(spec: CorpusSpec, out: Path, progress: bool) -> None:
    """Index the documents under a file lock, so two evals started together build it only once."""
    import fcntl

    from corpus import build_corpus
    from corpus.documents import Document

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (out / MANIFEST).exists():  # built by another process while we waited
                return
            print(
                f"indexing {len(spec.documents)} {spec.name} passages into {out} (once) ...", file=sys.stderr
            )
            docs = (Document.from_dict(d) for d in spec.documents)
            build_corpus(sources=[], out=out, documents=docs, progress=progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
