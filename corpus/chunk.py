"""Chunking (A2): split a document's text into overlapping spans with character offsets.

Each chunk is at most ``chunk_chars`` characters and ends on the best natural boundary found in
its second half: a blank line, then a line end, then a sentence end, then a space.  The next chunk
starts ``overlap_chars`` before the previous end, moved forward to the start of a word, so a fact
cut by one boundary is whole in one of the two chunks.  Leading and trailing whitespace is left
out of every chunk; offsets always satisfy ``doc.text[c.start:c.end] == c.text``.
"""

from __future__ import annotations

import re

from corpus.documents import Chunk, Document, chunk_id

_SENTENCE_END = re.compile(r"[.!?;:][\"')\]]*\s")


def _best_break(text: str, lo: int, hi: int) -> int:
    """The offset in (lo, hi] to end a chunk at: after a paragraph, line, sentence or word."""
    for sep in ("\n\n", "\n"):
        i = text.rfind(sep, lo, hi)
        if i > lo:
            return i
    last = -1
    for m in _SENTENCE_END.finditer(text, lo, hi):
        last = m.end() - 1
    if last > lo:
        return last
    i = text.rfind(" ", lo, hi)
    if i > lo:
        return i
    return hi


def chunk_text_spans(text: str, chunk_chars: int = 800, overlap_chars: int = 120) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the chunks of ``text``."""
    if chunk_chars < 50:
        raise ValueError(f"chunk_chars must be at least 50, got {chunk_chars}")
    if not 0 <= overlap_chars < chunk_chars // 2:
        raise ValueError(f"overlap_chars must be in [0, chunk_chars/2), got {overlap_chars}")
    spans: list[tuple[int, int]] = []
    n = len(text)
    start = 0
    while start < n:
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        hard_end = min(start + chunk_chars, n)
        end = hard_end if hard_end == n else _best_break(text, start + chunk_chars // 2, hard_end)
        stripped_end = end
        while stripped_end > start and text[stripped_end - 1].isspace():
            stripped_end -= 1
        if stripped_end > start:
            spans.append((start, stripped_end))
        if end >= n:
            break
        nxt = max(end - overlap_chars, start + 1)
        if nxt > 0 and not text[nxt - 1].isspace():  # move to the start of the next word
            sp = re.search(r"\s", text[nxt:end])
            nxt = nxt + sp.start() + 1 if sp else end
        start = nxt
    return spans


def chunk_document(doc: Document, chunk_chars: int = 800, overlap_chars: int = 120) -> list[Chunk]:
    return [
        Chunk(id=chunk_id(doc.id, i), doc_id=doc.id, n=i, start=s, end=e, text=doc.text[s:e])
        for i, (s, e) in enumerate(chunk_text_spans(doc.text, chunk_chars, overlap_chars))
    ]
