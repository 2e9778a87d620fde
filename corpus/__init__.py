"""corpus: documents → chunks → FAISS + BM25 indexes, and the Browser (search / open / find) over them.

```python
from corpus import open_corpus
browser = open_corpus()                  # the default corpus (Wikipedia vital articles + Factbook)
hits = browser.search("capital of France", k=5)
page = browser.open(hits[0].doc_id)      # numbered lines, 30 a page
matches = browser.find("Capital")        # lines of the opened document
```

The default corpus lives in ``$RESEARCH_AGENT_CORPUS`` or ``<cache>/corpora/default`` and is built
once, on first use, from the ``default`` preset, in two phases (``corpus.staged``): the chunks and
BM25 index first (seconds to a minute), searched at once, then the dense index in a detached
background process (minutes).  Until it is done ``open_corpus`` searches BM25; the first open after
it uses hybrid search.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from corpus.build import add_documents, build_corpus
from corpus.documents import Chunk, Document
from corpus.local import LocalBrowser
from corpus.store import MANIFEST, CorpusError, build_lock, dense_pending, rebuild_command

__all__ = [
    "Chunk",
    "CorpusError",
    "Document",
    "LocalBrowser",
    "add_documents",
    "build_corpus",
    "default_corpus_dir",
    "open_corpus",
]

ENV_VAR = "RESEARCH_AGENT_CORPUS"


def default_corpus_dir() -> Path:
    """``$RESEARCH_AGENT_CORPUS`` if set, else ``<per-user cache>/corpora/default``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    from corpus.files import cache_dir

    return cache_dir() / "corpora" / "default"


def _build_default(path: Path) -> None:
    """Build the chunks and BM25 index of the default corpus at ``path`` once, even when several
    processes ask at the same time (the dense index follows: ``corpus.staged``)."""
    from corpus.staged import build_sparse

    with build_lock(path):
        if (path / MANIFEST).exists():  # another process built it while we waited
            return
        print(
            f"building the default corpus at {path}: chunks and BM25 first (once; about a minute), "
            "the dense index in the background after ...",
            file=sys.stderr,
            flush=True,
        )
        build_sparse(path, preset="default", progress=True)


BACKENDS = ("local", "live", "remote")


def open_browser(backend: str = "local", *, corpus: str | Path | None = None, retrieval_url: str | None = None,
                 retriever: str = "hybrid", record_dir: str | None = None, replay_dir: str | None = None) -> Any:
    """The one place a ``Browser`` is chosen: a local corpus (``corpus``; None = the default corpus),
    a retrieval service (``retrieval_url``, or backend "remote"), or the live web (Tavily +
    trafilatura; ``record_dir`` / ``replay_dir`` record or replay its responses)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "live":
        from corpus.live import LiveBrowser

        return LiveBrowser.from_env(record_dir=record_dir, replay_dir=replay_dir)
    if backend == "remote" or retrieval_url:
        if not retrieval_url:
            raise ValueError("the remote backend needs a retrieval URL (python -m corpus serve prints it)")
        from corpus.service import RemoteBrowser

        return RemoteBrowser(retrieval_url)
    return open_corpus(corpus, retriever=retriever)


def open_corpus(
    path: str | Path | None = None, *, retriever: str = "hybrid", build_if_missing: bool = True
) -> LocalBrowser:
    """A ``LocalBrowser`` over the corpus at ``path`` (None: the default corpus, built on first use).

    A corpus whose dense index is still being built is searched by BM25 (an explicit
    ``retriever="dense"`` is a ``CorpusError`` saying so); unless ``build_if_missing`` is False or
    the caller asked for ``retriever="bm25"`` (it will never use the dense index, and an eval or a
    GPU check measured on BM25 must not share its cores with a background embedder), its dense
    build is started in the background when no process is running it, and one line on stderr says
    so.  An explicit ``path`` that is not a corpus raises ``CorpusError`` naming the
    command that builds it.
    """
    if path is None:
        target = default_corpus_dir()
        if not (target / MANIFEST).exists():
            if not build_if_missing:
                raise CorpusError(
                    f"the default corpus at {target} is not built yet. Build it with: "
                    f"{rebuild_command(target)}"
                )
            _build_default(target)
    else:
        target = Path(path).expanduser()
    browser = LocalBrowser(target, retriever=retriever)
    if dense_pending(browser.manifest) and build_if_missing and retriever != "bm25":
        from corpus.staged import resume_dense_build

        print(resume_dense_build(target), file=sys.stderr, flush=True)
    return browser
