"""A corpus in two phases: chunks + BM25 first (seconds to a minute), the dense index after.

Embedding the 17,121 chunks of the default corpus takes ~13 minutes on two cores; BM25 over the
same chunks takes seconds.  So the first ``open_corpus()`` on a fresh machine builds in two phases:

1. ``build_sparse``: read the documents, chunk them, build BM25 and publish the corpus without
   ``dense.faiss`` (atomically, as ``build_corpus`` does); its manifest says
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
from collections.abc import Iterable, Iterator
from pathlib import Path

from corpus.build import (
    BM25_TITLE_WEIGHT,
    _chunk_all,
    _embed,
    _embedding_cache,
    _progress,
    _texts,
    _unique,
    index_text,
    sparse_text,
)
from corpus.documents import LINE_WIDTH, Document
from corpus.embed import Embedder, embedder_name
from corpus.index import INDEX_TYPES, SparseIndex, new_dense_index, write_dense
from corpus.presets import preset_documents, preset_parts, preset_source_hashes
from corpus.sources import Skips
from corpus.store import (
    CHUNKS,
    DENSE,
    DENSE_BUILDING,
    DOCUMENTS,
    KIND,
    MANIFEST,
    MAX_SKIPS_RECORDED,
    SCHEMA_VERSION,
    SPARSE,
    CorpusError,
    build_lock,
    build_running,
    check_writable_target,
    dense_log_path,
    dense_pending,
    library_versions,
    now_iso,
    publish,
    read_chunk_rows,
    read_documents,
    read_manifest,
    staging_dir,
    write_jsonl,
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
    out = Path(out).expanduser()
    if index_type not in INDEX_TYPES:
        raise CorpusError(f"unknown index type {index_type!r}; choose one of {', '.join(INDEX_TYPES)}")
    if preset is None and documents is None:
        raise CorpusError("nothing to build: give a preset (default) or documents")
    if preset is not None:
        try:
            preset_parts(preset)
        except ValueError as e:
            raise CorpusError(str(e)) from e
    check_writable_target(out)
    t0 = time.perf_counter()
    skips = Skips()
    hashes: dict[str, str] = {}
    given = [0]

    def all_docs() -> Iterator[Document]:
        if preset is not None:
            hashes.update(preset_source_hashes(preset, quiet=not progress))
            yield from preset_documents(preset, quiet=not progress)
        for doc in documents or ():
            given[0] += 1
            yield doc

    try:
        docs = list(
            _unique(_progress(all_docs(), desc="reading", unit="doc", enabled=progress), skips, set())
        )
    except (OSError, ValueError) as e:
        raise CorpusError(f"cannot read the sources: {e}") from e
    if not docs:
        raise CorpusError(f"no documents to index ({len(skips)} items skipped); check the sources")
    rows = _chunk_all(docs, chunk_chars, overlap_chars, progress)
    by_id = {d.id: d for d in docs}
    sparse = SparseIndex.build(_texts(rows, by_id, sparse_text))
    elapsed = time.perf_counter() - t0
    manifest = {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "created": now_iso(),
        "updated": now_iso(),
        "embedder": {"name": embedder_name(embedder), "dim": None, "normalized": True},
        "index": {
            "dense": index_type,
            "dense_status": DENSE_BUILDING,
            "metric": "inner_product",
            "sparse": "bm25s",
            "bm25_title_weight": BM25_TITLE_WEIGHT,
            "fusion": "rrf",
        },
        "chunking": {
            "chunk_chars": chunk_chars,
            "overlap_chars": overlap_chars,
            "title_prefix": True,
            "line_width": LINE_WIDTH,
        },
        "counts": {"documents": len(docs), "chunks": len(rows), "skipped": len(skips)},
        "skipped": skips.items[:MAX_SKIPS_RECORDED],
        "sources": {"preset": preset, "paths": [], "documents": given[0], "hashes": hashes},
        "versions": library_versions(),
        "build": {"staged": True, "sparse_seconds": round(elapsed, 2)},
    }
    staged = staging_dir(out)
    try:
        write_jsonl(staged / DOCUMENTS, (d.to_dict() for d in docs))
        write_jsonl(staged / CHUNKS, ([d, n, s, e] for d, n, s, e in rows))
        (staged / SPARSE).mkdir()
        sparse.save(staged / SPARSE)
        write_manifest(staged / MANIFEST, manifest)
        publish(staged, out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if progress:
        print(
            f"built the chunks and BM25 index of {out}: {len(docs)} documents, {len(rows)} chunks, "
            f"{elapsed:.1f} s (the dense index is not built yet)",
            file=sys.stderr,
            flush=True,
        )
    return manifest


def build_dense(out: str | Path, *, batch_size: int = 64, progress: bool = True) -> dict:
    """Phase 2: embed the chunks of the corpus at ``out`` and add its dense index; return the manifest.

    Waits for the build lock; a corpus whose dense index is already there is left as it is."""
    root = Path(out).expanduser()
    with build_lock(root):
        manifest = read_manifest(root, dense_pending_ok=True)
        if not dense_pending(manifest):
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
        manifest["embedder"] = {**manifest["embedder"], "dim": emb.dim}
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
