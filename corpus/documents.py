"""Documents and chunks: the records every corpus is made of.

A ``Document`` is one readable page (a Factbook country, a Wikipedia summary, an HTML file); a
``Chunk`` is a span of its text that is embedded and indexed on its own.  Chunks carry character
offsets into the document text, so ``document.text[chunk.start:chunk.end] == chunk.text`` always,
and their ids are stable: ``f"{doc_id}#{n}"``.

Lines are what ``open`` shows and ``find`` greps: the text split on newlines, long lines wrapped
at about 200 characters on word boundaries.  Each line keeps its offsets too, so a line maps to the
chunk that contains it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

LINE_WIDTH = 200


@dataclass
class Document:
    id: str
    title: str
    text: str
    url: str = ""
    links: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Document:
        return cls(
            id=d["id"],
            title=d.get("title", ""),
            text=d["text"],
            url=d.get("url", "") or "",
            links=list(d.get("links") or []),
            meta=dict(d.get("meta") or {}),
        )


@dataclass
class Chunk:
    id: str
    doc_id: str
    n: int
    start: int
    end: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chunk_id(doc_id: str, n: int) -> str:
    return f"{doc_id}#{n}"


def split_chunk_id(cid: str) -> tuple[str, int] | None:
    """``"doc#3"`` → ``("doc", 3)``; None when ``cid`` does not end in ``#<int>``."""
    doc, sep, n = cid.rpartition("#")
    if not sep or not doc or not n.isdigit():
        return None
    return doc, int(n)


@dataclass(frozen=True)
class Line:
    start: int  # offset of the line's first character in the document text
    end: int  # offset one past its last character (the spaces of a wrap excluded)


def wrap_lines(text: str, width: int = LINE_WIDTH) -> list[Line]:
    """Split ``text`` on newlines and wrap lines longer than ``width`` at the last space before it.

    A word longer than ``width`` is cut hard.  Empty lines are kept (they are lines of the
    document and keep line numbers faithful to the text).
    """
    lines: list[Line] = []
    pos = 0
    n = len(text)
    while pos <= n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl
        start = pos
        while end - start > width:
            cut = text.rfind(" ", start + 1, start + width + 1)
            if cut <= start:
                cut = start + width
                lines.append(Line(start, cut))
                start = cut
            else:
                lines.append(Line(start, cut))
                start = cut + 1
            while start < end and text[start] == " ":
                start += 1
        lines.append(Line(start, end))
        if nl < 0:
            break
        pos = nl + 1
    return lines
