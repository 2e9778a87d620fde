"""``LocalBrowser`` (A6): search / open / find over a corpus directory built by ``corpus.build``.

The loaded corpus (documents, chunk offsets, FAISS and BM25 indexes, the embedder) is shared and
read-only; which document is open is per browser.  The agent runs trajectories concurrently: give
each trajectory its own ``browser.fork()`` (cheap) so one trajectory's ``open`` never changes
another's ``find``.  ``search`` is safe from many threads at once.

A corpus whose dense index is still being built (a staged build, ``corpus.staged``) is searched
by BM25: hybrid falls back to it, and dense is refused with a ``CorpusError`` saying it is building.
"""

from __future__ import annotations

import re
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from corpus.browser import DocumentNotFound, FindMatch, Hit, NoDocumentOpen, Page, PageOutOfRange, QueryError
from corpus.documents import LINE_WIDTH, Chunk, Document, Line, chunk_id, split_chunk_id, wrap_lines
from corpus.embed import Embedder, embedder_name
from corpus.index import SparseIndex, dense_search, read_dense, rrf_fuse
from corpus.store import (
    CHUNKS,
    DENSE,
    SPARSE,
    CorpusError,
    dense_missing,
    dense_pending_message,
    read_chunk_rows,
    read_documents,
    read_manifest,
)
from corpus.store import rebuild_command as _rebuild

MODES = ("dense", "bm25", "hybrid")
RETRIEVER_HELP = "how search ranks chunks: dense (embeddings), bm25 (words) or hybrid (both, fused)"


def add_retriever_flag(parser, *, default: str | None = "hybrid", help: str = RETRIEVER_HELP) -> None:
    """``--retriever``, the one definition every command shares, so its choices are always ``MODES``."""
    parser.add_argument("--retriever", default=default, choices=MODES, help=help)
MAX_K = 50
MAX_QUERY_CHARS = 2000
MAX_PATTERN_CHARS = 500
MAX_FIND_MATCHES = 200
REGEX_TIMEOUT_S = 1.0
PAGE_LINES = 30
_WORD = re.compile(r"\w\w+")


class _Corpus:
    """Everything loaded from a corpus directory; shared by a browser and its forks."""

    def __init__(self, path: Path, embedder: str | None, mmap: bool):
        self.path = path
        self.manifest = read_manifest(path, dense_pending_ok=True)
        rebuild = _rebuild(path, self.manifest)
        built_with = self.manifest["embedder"].get("name")
        if embedder is not None and embedder_name(embedder) != built_with:
            raise CorpusError(
                f"embedder mismatch: the corpus at {path} was embedded with {built_with!r}, not "
                f"{embedder_name(embedder)!r}. Use that embedder, or rebuild with --embedder: {rebuild}"
            )
        self.docs: list[Document] = read_documents(path, self.manifest)
        self.doc_index = {d.id: i for i, d in enumerate(self.docs)}
        self.url_index: dict[str, int] = {}
        self.title_index: dict[str, int] = {}
        for i, d in enumerate(self.docs):
            if d.url:
                self.url_index.setdefault(_norm_url(d.url), i)
            self.title_index.setdefault(d.title.casefold(), i)
        self._load_chunks(read_chunk_rows(path, self.manifest), rebuild)
        n = len(self.chunk_doc)
        self.dense = None if dense_missing(self.manifest) else self._load_dense(n, mmap, rebuild)
        try:
            self.sparse = SparseIndex.load(path / SPARSE, mmap=mmap)
        except Exception as e:
            raise CorpusError(
                f"corrupt corpus at {path}: {SPARSE}/ cannot be read ({e}). Rebuild it with: {rebuild}"
            ) from e
        if self.sparse.n != n:
            raise CorpusError(
                f"corrupt corpus at {path}: the BM25 index holds {self.sparse.n} chunks, expected {n}. "
                f"Rebuild it with: {rebuild}"
            )
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._lines: dict[int, list[Line]] = {}

    def _load_dense(self, n: int, mmap: bool, rebuild: str):
        try:
            dense = read_dense(self.path / DENSE, mmap=mmap)
        except Exception as e:
            raise CorpusError(
                f"corrupt corpus at {self.path}: {DENSE} cannot be read ({e}). Rebuild it with: {rebuild}"
            ) from e
        dim = self.manifest["embedder"].get("dim")
        if dense.ntotal != n or dense.d != dim:
            raise CorpusError(
                f"corrupt corpus at {self.path}: {DENSE} holds {dense.ntotal} vectors of dimension {dense.d}, "
                f"expected {n} of dimension {dim}. Rebuild it with: {rebuild}"
            )
        return dense

    def _load_chunks(self, rows: list[tuple[str, int, int, int]], rebuild: str) -> None:
        n = len(rows)
        self.chunk_doc = np.empty(n, dtype=np.int32)
        self.chunk_n = np.empty(n, dtype=np.int32)
        self.chunk_start = np.empty(n, dtype=np.int64)
        self.chunk_end = np.empty(n, dtype=np.int64)
        self.doc_first = np.full(len(self.docs), -1, dtype=np.int64)
        self.doc_count = np.zeros(len(self.docs), dtype=np.int32)
        for r, (doc_id, cn, s, e) in enumerate(rows):
            di = self.doc_index.get(doc_id)
            if di is None:
                raise CorpusError(
                    f"corrupt corpus at {self.path}: {CHUNKS} row {r + 1} names unknown document "
                    f"{doc_id!r}. Rebuild it with: {rebuild}"
                )
            if self.doc_first[di] < 0:
                self.doc_first[di] = r
            if (
                cn != self.doc_count[di]
                or r != self.doc_first[di] + cn
                or not 0 <= s < e <= len(self.docs[di].text)
            ):
                raise CorpusError(
                    f"corrupt corpus at {self.path}: chunk {doc_id}#{cn} does not fit its document. "
                    f"Rebuild it with: {rebuild}"
                )
            self.doc_count[di] += 1
            self.chunk_doc[r], self.chunk_n[r], self.chunk_start[r], self.chunk_end[r] = di, cn, s, e
        counts = self.manifest["counts"]
        if counts.get("chunks") != n or counts.get("documents") != len(self.docs):
            raise CorpusError(
                f"corrupt corpus at {self.path}: the manifest counts {counts.get('documents')} documents and "
                f"{counts.get('chunks')} chunks but the files hold {len(self.docs)} and {n}. Rebuild it with: {rebuild}"
            )

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._embedder_lock:
                if self._embedder is None:
                    emb = Embedder(self.manifest["embedder"]["name"])
                    if emb.dim != self.dense.d:
                        raise CorpusError(
                            f"embedder mismatch: {emb.name} gives {emb.dim}-d vectors, the index at {self.path} "
                            f"holds {self.dense.d}-d ones. Rebuild it with: {_rebuild(self.path, self.manifest)}"
                        )
                    self._embedder = emb
        return self._embedder

    def lines(self, di: int) -> list[Line]:
        lines = self._lines.get(di)
        if lines is None:
            if len(self._lines) > 4096:
                self._lines.clear()
            lines = wrap_lines(self.docs[di].text, LINE_WIDTH)
            self._lines[di] = lines
        return lines


def _norm_url(url: str) -> str:
    return re.sub(r"^https?://", "", url.strip(), flags=re.I).rstrip("/").lower()


class LocalBrowser:
    """The Browser over a local corpus directory (see ``corpus.browser.Browser``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        retriever: str = "hybrid",
        embedder: str | None = None,
        page_lines: int = PAGE_LINES,
        snippet_chars: int = 300,
        mmap: bool = True,
        _shared: _Corpus | None = None,
    ):
        if retriever not in MODES:
            raise ValueError(f"unknown retriever {retriever!r}; choose one of {', '.join(MODES)}")
        self._c = _shared or _Corpus(Path(path).expanduser(), embedder, mmap)
        self.path: Path = self._c.path
        self.manifest: dict = self._c.manifest
        if self._c.dense is None:
            if retriever == "dense":
                raise CorpusError(dense_pending_message(self.path, self.manifest))
            retriever = "bm25"
        self.retriever = retriever
        self.page_lines = page_lines
        self.snippet_chars = snippet_chars
        self._open_doc: int | None = None

    def fork(self) -> LocalBrowser:
        """A new browser sharing the loaded corpus, with its own opened-document state."""
        return LocalBrowser(
            self.path,
            retriever=self.retriever,
            page_lines=self.page_lines,
            snippet_chars=self.snippet_chars,
            _shared=self._c,
        )

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"LocalBrowser({str(self.path)!r}, {c['documents']} documents, {c['chunks']} chunks, {self.retriever})"

    def __len__(self) -> int:
        return len(self._c.docs)

    # ------------------------------------------------------------------------------------------ search

    def search(self, query: str, k: int = 5, mode: str | None = None) -> list[Hit]:
        """The ``k`` (at most 50) best chunks for ``query``; ``mode`` dense, bm25 or hybrid (RRF of both)."""
        if not isinstance(query, str) or not query.strip():
            raise QueryError("empty query: give some words to search for")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"query too long ({len(query)} characters; at most {MAX_QUERY_CHARS}): shorten it"
            )
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise QueryError(f"k must be a positive integer, got {k!r}")
        k = min(k, MAX_K)
        mode = mode or self.retriever
        if mode not in MODES:
            raise QueryError(f"unknown search mode {mode!r}; choose one of {', '.join(MODES)}")
        query = query.strip()
        if self._c.dense is None:
            if mode == "dense":
                raise QueryError(dense_pending_message(self.path, self.manifest))
            mode = "bm25"  # hybrid, until the dense index is built
        if mode == "dense":
            ranked = self._dense(query, k)
        elif mode == "bm25":
            ranked = self._c.sparse.search(query, k)
        else:
            depth = min(max(4 * k, 40), 200)
            dense = [r for r, _ in self._dense(query, depth)]
            sparse = [r for r, _ in self._c.sparse.search(query, depth)]
            ranked = rrf_fuse([dense, sparse], k)
        terms = {w.casefold() for w in _WORD.findall(query)}
        return [self._hit(row, score, terms) for row, score in ranked]

    def _dense(self, query: str, k: int) -> list[tuple[int, float]]:
        qv = self._c.embedder.encode([query])
        scores, rows = dense_search(self._c.dense, qv, k)
        return [(int(r), float(s)) for r, s in zip(rows[0], scores[0], strict=True) if r >= 0]

    def _hit(self, row: int, score: float, terms: set[str]) -> Hit:
        c = self._c
        doc = c.docs[int(c.chunk_doc[row])]
        text = doc.text[int(c.chunk_start[row]) : int(c.chunk_end[row])]
        return Hit(
            doc_id=doc.id,
            chunk_id=chunk_id(doc.id, int(c.chunk_n[row])),
            title=doc.title,
            url=doc.url,
            snippet=_snippet(text, terms, self.snippet_chars),
            score=round(float(score), 6),
        )

    # -------------------------------------------------------------------------------------------- open

    def _resolve(self, doc_or_url: str) -> tuple[int, int | None]:
        """(document index, chunk row or None) for a doc id, chunk id, URL or exact title."""
        c = self._c
        if not isinstance(doc_or_url, str) or not doc_or_url.strip():
            raise DocumentNotFound("open needs a document id, chunk id or URL; got an empty string")
        key = doc_or_url.strip()
        if key in c.doc_index:
            return c.doc_index[key], None
        parsed = split_chunk_id(key)
        if parsed is not None and parsed[0] in c.doc_index:
            di = c.doc_index[parsed[0]]
            if parsed[1] >= c.doc_count[di]:
                raise DocumentNotFound(
                    f"no chunk {key!r}: {parsed[0]!r} has chunks #0..#{c.doc_count[di] - 1}"
                )
            return di, int(c.doc_first[di] + parsed[1])
        if re.match(r"(?i)^https?://", key) or key.startswith("www."):
            di = c.url_index.get(_norm_url(key))
            if di is not None:
                return di, None
        if key.replace(" ", "_") in c.doc_index:
            return c.doc_index[key.replace(" ", "_")], None
        di = c.title_index.get(key.casefold())
        if di is not None:
            return di, None
        raise DocumentNotFound(
            f"no document {key!r} in this corpus: open a doc id, chunk id or URL from search results"
        )

    def open(self, doc_or_url: str, page: int | None = None) -> Page:
        """Page ``page`` (default 1, or the page holding the chunk for a chunk id) of a document."""
        di, row = self._resolve(doc_or_url)
        c = self._c
        lines = c.lines(di)
        total_pages = max(1, -(-len(lines) // self.page_lines))
        if page is None:
            page = 1
            if row is not None:
                line_index = bisect_right([ln.start for ln in lines], int(c.chunk_start[row])) - 1
                page = max(0, line_index) // self.page_lines + 1
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            raise PageOutOfRange(f"page must be a whole number from 1, got {page!r}")
        doc = c.docs[di]
        if page > total_pages:
            raise PageOutOfRange(
                f"page {page} is past the end of {doc.id!r}, which has {total_pages} page(s) of {self.page_lines} lines"
            )
        first = (page - 1) * self.page_lines
        shown = lines[first : first + self.page_lines]
        lo, hi = shown[0].start, max(shown[-1].end, shown[0].start + 1)
        f = int(c.doc_first[di])
        ids = [
            chunk_id(doc.id, n)
            for n in range(int(c.doc_count[di]))
            if c.chunk_start[f + n] < hi and c.chunk_end[f + n] > lo
        ]
        self._open_doc = di
        return Page(
            doc_id=doc.id,
            title=doc.title,
            url=doc.url,
            lines=[doc.text[ln.start : ln.end] for ln in shown],
            first_line=first + 1,
            page=page,
            total_pages=total_pages,
            total_lines=len(lines),
            chunk_ids=ids,
        )

    # -------------------------------------------------------------------------------------------- find

    def find(self, pattern: str, regex: bool = False) -> list[FindMatch]:
        """Lines of the opened document that contain ``pattern`` (case-insensitive; at most 200).

        Literal by default; with ``regex=True`` a regular expression run by the ``regex`` module under
        a time limit, so a catastrophic pattern fails with ``QueryError`` instead of hanging.
        """
        if self._open_doc is None:
            raise NoDocumentOpen("find needs an open document: call open(doc_id) first")
        if not isinstance(pattern, str) or not pattern.strip():
            raise QueryError("empty find pattern")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise QueryError(
                f"find pattern too long ({len(pattern)} characters; at most {MAX_PATTERN_CHARS})"
            )
        c = self._c
        di = self._open_doc
        doc = c.docs[di]
        lines = c.lines(di)
        texts = [doc.text[ln.start : ln.end] for ln in lines]
        if regex:
            hits = _regex_lines(pattern, texts)
        else:
            needle = pattern.casefold()
            hits = [i for i, t in enumerate(texts) if needle in t.casefold()]
        f, count = int(c.doc_first[di]), int(c.doc_count[di])
        starts = c.chunk_start[f : f + count]
        out = []
        for i in hits[:MAX_FIND_MATCHES]:
            n = max(0, int(np.searchsorted(starts, lines[i].start, side="right")) - 1)
            out.append(FindMatch(line_no=i + 1, text=texts[i], chunk_id=chunk_id(doc.id, n)))
        return out

    # ---------------------------------------------------------------------------------------- records

    def chunk_text(self, chunk_id: str) -> str:
        c = self._c
        parsed = split_chunk_id(chunk_id) if isinstance(chunk_id, str) else None
        if parsed is None or parsed[0] not in c.doc_index:
            raise DocumentNotFound(f"no chunk {chunk_id!r} in this corpus (chunk ids look like 'doc_id#3')")
        di = c.doc_index[parsed[0]]
        if parsed[1] >= c.doc_count[di]:
            raise DocumentNotFound(
                f"no chunk {chunk_id!r}: {parsed[0]!r} has chunks #0..#{c.doc_count[di] - 1}"
            )
        row = int(c.doc_first[di]) + parsed[1]
        return c.docs[di].text[int(c.chunk_start[row]) : int(c.chunk_end[row])]

    def document(self, doc_id: str) -> Document:
        di = self._c.doc_index.get(doc_id)
        if di is None:
            raise DocumentNotFound(f"no document {doc_id!r} in this corpus")
        return self._c.docs[di]

    def documents(self) -> Iterator[Document]:
        return iter(self._c.docs)

    def chunks(self, doc_id: str) -> list[Chunk]:
        doc = self.document(doc_id)
        c = self._c
        di = c.doc_index[doc_id]
        f = int(c.doc_first[di])
        out = []
        for n in range(int(c.doc_count[di])):
            s, e = int(c.chunk_start[f + n]), int(c.chunk_end[f + n])
            out.append(Chunk(id=chunk_id(doc_id, n), doc_id=doc_id, n=n, start=s, end=e, text=doc.text[s:e]))
        return out


def _regex_lines(pattern: str, texts: list[str]) -> list[int]:
    """Indexes of the lines matching ``pattern``; ``QueryError`` for a bad or too slow pattern."""
    import regex

    try:
        compiled = regex.compile(pattern, regex.IGNORECASE)
    except (regex.error, OverflowError, RecursionError) as e:
        raise QueryError(f"invalid regular expression {pattern!r}: {e}") from e
    deadline = time.monotonic() + REGEX_TIMEOUT_S
    hits = []
    try:
        for i, t in enumerate(texts):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if compiled.search(t, timeout=left):
                hits.append(i)
    except TimeoutError as e:
        raise QueryError(
            f"regular expression {pattern!r} took longer than {REGEX_TIMEOUT_S:g} s (catastrophic backtracking?); "
            "simplify it or search literally"
        ) from e
    return hits


def _snippet(text: str, terms: set[str], width: int) -> str:
    """The ``width`` characters of ``text`` holding the most query terms, cut on word boundaries."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= width:
        return flat
    best, best_score = 0, -1
    starts = [0] + [m.end() for m in re.finditer(r"\s", flat)]
    for s in starts:
        window = flat[s : s + width].casefold()
        score = sum(1 for t in terms if t in window)
        if score > best_score:
            best, best_score = s, score
        if s + width >= len(flat):
            break
    piece = flat[best : best + width]
    if best + width < len(flat):
        cut = piece.rfind(" ")
        piece = (piece[:cut] if cut > width // 2 else piece) + " …"
    return ("… " + piece) if best > 0 else piece
