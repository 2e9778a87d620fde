"""A corpus in two phases: chunks + BM25 first (seconds to a minute), the dense index after.

Embedding the 17,121 chunks of the default corpus takes ~13 minutes on two cores; BM25 over the
same chunks takes seconds.  So the first ``open_corpus()`` on a fresh machine builds in two phases:

1. ``build_sparse``: ``build_corpus(dense=False)`` reads the documents, chunks them, builds BM25 and
   publishes the corpus without ``dense.faiss`` (atomically); its manifest says
   ``"index": {"dense_status": "building", ...}``.  It is searched by BM25 at once.
2. ``build_dense``: embed the chunks, rename ``dense.faiss`` into the corpus, then drop the mark
   from the manifest (an atomic replace).  It runs under the corpus's build lock, usually in a
   detached process (``start_dense_build``, ``python -m corpus.staged DIR``), so two processes
   never build at once.  A killed build leaves the BM25 corpus as it was; the embedding blocks it
   finished are kept (``build_corpus``'s embedding cache), so the rerun embeds only the rest.

The chunks, the texts embedded and BM25-indexed, the embedder and the FAISS index are made by the
functions ``build_corpus`` uses, so the finished corpus searches exactly as a one-phase build.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from corpus.build import _embed, _embedding_cache, _texts, build_corpus, index_text
from corpus.documents import Document
from corpus.embed import Embedder
from corpus.index import new_dense_index, write_dense
from corpus.store import (
    DENSE,
    MANIFEST,
    CorpusError,
    build_lock,
    build_running,
    dense_log_path,
    dense_missing,
    now_iso,
    read_chunk_rows,
    read_documents,
    read_manifest,
    write_manifest,
)

BACKGROUND: dict[Path, subprocess.Popen] = {}  # the dense builds this process started, by corpus directory


def build_sparse(
    out: str | Path,
    *,
    preset: str | None = None,
    documents: Iterable[Document] | None = None,
    index_type: str = "flat",
    chunk_chars: int = 800,
    overlap_chars: int = 120,
    embedder: str | None = None,
    progress: bool = True,
) -> dict:
    """Phase 1: publish a corpus at ``out`` with its chunks and BM25 index, its dense index marked
    as still building; return its manifest.  ``build_dense`` completes it."""
    if preset is None and documents is None:
        raise CorpusError("nothing to build: give a preset (default) or documents")
    return build_corpus(out=out, preset=preset, documents=documents, index_type=index_type,
                        chunk_chars=chunk_chars, overlap_chars=overlap_chars, embedder=embedder,
                        progress=progress, dense=False)


def build_dense(out: str | Path, *, batch_size: int = 64, progress: bool = True) -> dict:
    """Phase 2: embed the chunks of the corpus at ``out`` and add its dense index; return the manifest.

    Waits for the build lock; a corpus whose dense index is already there is left as it is."""
    root = Path(out).expanduser()
    with build_lock(root):
        manifest = read_manifest(root, dense_pending_ok=True)
        if not dense_missing(manifest):
            return manifest
        for stale in root.glob(f".{DENSE}.tmp-*"):  # left by a killed build
            stale.unlink(missing_ok=True)
        t0 = time.perf_counter()
        docs = read_documents(root, manifest)
        rows = read_chunk_rows(root, manifest)
        by_id = {d.id: d for d in docs}
        emb = Embedder(manifest["embedder"]["name"])
        texts = _texts(rows, by_id, index_text)
        vectors = _embed(emb, texts, batch_size, progress, cache=_embedding_cache(root))
        embed_s = time.perf_counter() - t0
        dense = new_dense_index(manifest["index"]["dense"], emb.dim, vectors)
        dense.add(vectors)
        tmp = root / f".{DENSE}.tmp-{os.getpid()}"
        write_dense(dense, tmp)
        os.replace(tmp, root / DENSE)
        elapsed = time.perf_counter() - t0
        manifest = dict(manifest)
        manifest["updated"] = now_iso()
        manifest["embedder"] = {**manifest["embedder"], "dim": emb.dim, "dtype": emb.dtype}
        manifest["index"] = {k: v for k, v in manifest["index"].items() if k != "dense_status"}
        build = dict(manifest.get("build") or {})
        seconds = float(build.get("sparse_seconds") or 0) + elapsed
        build.update(
            seconds=round(seconds, 2),
            embed_seconds=round(embed_s, 2),
            dense_seconds=round(elapsed, 2),
            chunks_per_s=round(len(rows) / seconds, 1) if seconds else None,
        )
        manifest["build"] = build
        write_manifest(root / MANIFEST, manifest)  # the moment hybrid search becomes possible
        shutil.rmtree(_embedding_cache(root), ignore_errors=True)
    if progress:
        print(
            f"built the dense index of {root}: {len(rows)} chunks, {elapsed:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return manifest


def start_dense_build(out: str | Path) -> subprocess.Popen:
    """Run ``build_dense(out)`` in a detached process (its own session, so it outlives the caller
    and a Ctrl-C of it), logging to ``dense_log_path(out)``; return the process."""
    root = Path(out).expanduser()
    log = dense_log_path(root)
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)  # so the child imports this very package
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corpus.staged", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    BACKGROUND[root] = proc
    return proc


def resume_dense_build(out: str | Path) -> str:
    """Make sure the dense index of ``out`` is being built (start it unless a build holds the lock);
    return the line that tells the user."""
    root = Path(out).expanduser()
    if build_running(root):
        where = f"another process is building it, log {dense_log_path(root)}"
    else:
        where = f"pid {start_dense_build(root).pid}, log {dense_log_path(root)}"
    return (
        f"answering from BM25 while the dense index builds in the background ({where}); "
        "later runs use hybrid search"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m corpus.staged",
        description="Build the dense index of a corpus whose chunks and BM25 index are built (phase 2).",
    )
    p.add_argument("dir")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    try:
        os.nice(10)  # a background job: the answer being generated in the foreground goes first
    except OSError:
        pass
    print(f"pid {os.getpid()}: building the dense index of {a.dir} at {now_iso()}", flush=True)
    try:
        build_dense(a.dir, batch_size=a.batch_size, progress=not a.quiet)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(f"done at {now_iso()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
