"""Indexes (A4, A5): dense FAISS, sparse BM25 (bm25s) and their reciprocal-rank fusion.

Row ``i`` of every index is chunk ``i`` of the corpus (line ``i`` of ``chunks.jsonl``), so search
results are chunk rows.  FAISS: ``flat`` (exact inner product, the default), ``ivf`` (IVF-Flat with
``nlist ≈ 4·√n`` lists, ``nprobe`` 16) or ``hnsw`` (HNSW-Flat, M=32, efSearch 64), all over
L2-normalised vectors so scores are cosines.  Loading memory-maps the FAISS file
(``faiss.IO_FLAG_MMAP``) and the BM25 matrices.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np

INDEX_TYPES = ("flat", "ivf", "hnsw")
RRF_K = 60  # the constant of Cormack et al. (2009): rank r contributes 1 / (RRF_K + r)


def _faiss():
    import faiss

    return faiss


def new_dense_index(index_type: str, dim: int, train_vectors: np.ndarray | None = None):
    """An empty FAISS index (IVF is trained on ``train_vectors``)."""
    faiss = _faiss()
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.hnsw.efSearch = 64
        return index
    if index_type == "ivf":
        n = 0 if train_vectors is None else len(train_vectors)
        nlist = max(1, min(int(4 * math.sqrt(max(n, 1))), n // 39))  # FAISS wants ≥ 39 points a list
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        if n:
            index.train(np.ascontiguousarray(train_vectors, dtype=np.float32))
        index.nprobe = min(16, nlist)
        return index
    raise ValueError(f"unknown index type {index_type!r}; choose one of {', '.join(INDEX_TYPES)}")


def tune_for_search(index) -> None:
    faiss = _faiss()
    if isinstance(index, faiss.IndexIVF):
        index.nprobe = min(16, index.nlist)
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = max(hnsw.efSearch, 64)


def write_dense(index, path: Path) -> None:
    _faiss().write_index(index, str(path))


def read_dense(path: Path, mmap: bool = True):
    faiss = _faiss()
    flags = (faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY) if mmap else 0
    index = faiss.read_index(str(path), flags)
    tune_for_search(index)
    return index


FEW_QUERIES = 8  # up to this many query vectors are searched on one thread


def dense_search(index, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` (scores, rows) per query; rows of -1 mark missing results.

    A few queries are searched on the calling thread alone: FAISS's OpenMP threads otherwise wake
    up right after the query encoder's (torch's) and the two pools fight for the cores.  On the
    2-core development machine one agent search (encode + search) went from 24 / 20 ms to 17 / 11
    ms p50 in two alternating passes of 150 queries; the flat search itself takes 1.2 ms on one
    thread.  ``omp_set_num_threads`` sets the calling thread's own setting, restored afterwards."""
    k = max(1, min(k, index.ntotal))
    q = np.ascontiguousarray(qvecs, dtype=np.float32)
    if len(q) > FEW_QUERIES:
        return index.search(q, k)
    faiss = _faiss()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(q, k)
    finally:
        faiss.omp_set_num_threads(threads)


# ------------------------------------------------------------------------------------------------ BM25


def bm25_tokenize(texts: list[str], show_progress: bool = False):
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=True, show_progress=show_progress)


class SparseIndex:
    """bm25s over the chunk texts (lower-cased, English stopwords removed, no stemming)."""

    def __init__(self, retriever):
        self.retriever = retriever
        self.n = int(retriever.scores["num_docs"])
        self._lock = threading.Lock()

    @classmethod
    def build(cls, texts: list[str], show_progress: bool = False) -> SparseIndex:
        import bm25s

        retriever = bm25s.BM25()
        retriever.index(bm25_tokenize(texts, show_progress), show_progress=show_progress)
        return cls(retriever)

    def save(self, directory: Path) -> None:
        self.retriever.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> SparseIndex:
        import bm25s

        return cls(bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` (row, score) with a positive score."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens or not tokens[0] or self.n == 0:
            return []
        k = max(1, min(k, self.n))
        with self._lock:
            rows, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [(int(r), float(s)) for r, s in zip(rows[0], scores[0], strict=True) if s > 0]


def rrf_fuse(rankings: list[list[int]], k: int, rrf_k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked lists of rows: ``score = Σ 1 / (rrf_k + rank)``."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, 1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (rrf_k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
