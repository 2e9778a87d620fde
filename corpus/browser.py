"""The Browser: the one interface through which the agent reaches any corpus.

Local FAISS/BM25 corpora, the live web (Tavily + trafilatura) and the HTTP retrieval service all
implement it, so ``ask``, synthesis, evaluation and RL rollouts never know which one they use.
OpenResearcher's three primitives: ``search`` ranks chunks, ``open`` shows a document as numbered
lines (paged), ``find`` greps the opened document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


class BrowserError(Exception):
    """Base class for errors a Browser reports to its caller (and the agent shows the model)."""


class QueryError(BrowserError):
    """The query or pattern is empty, too long or otherwise unusable."""


class DocumentNotFound(BrowserError):
    """``open`` got an id or URL the backend does not know."""


class NoDocumentOpen(BrowserError):
    """``find`` was called before any ``open``."""


class PageOutOfRange(BrowserError):
    """``open`` asked for a page past the end of the document."""


@dataclass
class Hit:
    doc_id: str
    chunk_id: str
    title: str
    url: str
    snippet: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Page:
    doc_id: str
    title: str
    url: str
    lines: list[str]  # the lines on this page
    first_line: int  # 1-based number of lines[0] in the whole document
    page: int  # 1-based
    total_pages: int
    total_lines: int
    # chunk ids overlapping this page, so the agent can cite what it read
    chunk_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def numbered(self) -> str:
        return "\n".join(f"L{self.first_line + i}: {line}" for i, line in enumerate(self.lines))


@dataclass
class FindMatch:
    line_no: int  # 1-based line number in the opened document
    text: str
    chunk_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Browser(Protocol):
    def search(self, query: str, k: int = 5) -> list[Hit]: ...

    def open(self, doc_or_url: str, page: int = 1) -> Page: ...

    def find(self, pattern: str, regex: bool = False) -> list[FindMatch]: ...

    def chunk_text(self, chunk_id: str) -> str:
        """Text of one chunk (used to check citations)."""
        ...
