"""Chunking (A2) and lines: offsets round-trip to the text, ids are stable, every word is covered."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus.chunk import chunk_text_spans
from corpus.documents import Document, wrap_lines


def test_chunks_round_trip_to_document_text(browser):
    n_chunks = 0
    for doc in browser.documents():
        chunks = browser.chunks(doc.id)
        assert chunks, doc.id
        for n, c in enumerate(chunks):
            assert c.id == f"{doc.id}#{n}" and c.doc_id == doc.id and c.n == n
            assert doc.text[c.start : c.end] == c.text == browser.chunk_text(c.id)
            assert c.text == c.text.strip() and len(c.text) <= 800
        n_chunks += len(chunks)
    assert n_chunks == browser.manifest["counts"]["chunks"]


def test_long_factbook_profile_is_many_overlapping_chunks(browser):
    chunks = browser.chunks("factbook/fr")
    assert len(chunks) > 10
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.start < b.start < a.end  # consecutive chunks overlap
        assert b.start == 0 or browser.document("factbook/fr").text[b.start - 1].isspace()  # start on a word


def _covered(text: str, spans: list[tuple[int, int]]) -> bool:
    cover = bytearray(len(text))
    for s, e in spans:
        cover[s:e] = b"\1" * (e - s)
    return all(cover[i] or ch.isspace() for i, ch in enumerate(text))


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("abc de.\n!?"), max_size=3000),
    st.integers(min_value=50, max_value=400),
    st.integers(min_value=0, max_value=24),
)
def test_spans_are_ordered_bounded_and_cover_every_word(text, size, overlap):
    spans = chunk_text_spans(text, size, overlap)
    assert all(0 <= s < e <= len(text) and e - s <= size for s, e in spans)
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(spans, spans[1:], strict=False))
    assert _covered(text, spans)


def test_chunk_parameters_are_checked():
    with pytest.raises(ValueError):
        chunk_text_spans("text", 10, 0)
    with pytest.raises(ValueError):
        chunk_text_spans("text", 100, 60)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=2000), st.integers(min_value=5, max_value=60))
def test_wrapped_lines_keep_offsets_and_width(text, width):
    lines = wrap_lines(text, width)
    assert len([ln for ln in lines]) >= text.count("\n") + 1
    for ln in lines:
        piece = text[ln.start : ln.end]
        assert "\n" not in piece and len(piece) <= width
    # nothing but spaces and newlines is lost between lines
    joined = "".join(text[ln.start : ln.end] for ln in lines)
    assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", text)


def test_long_lines_wrap_on_word_boundaries():
    doc = Document(id="d", title="t", text=" ".join(f"word{i}" for i in range(100)))
    lines = wrap_lines(doc.text, 200)
    assert len(lines) > 1
    for ln in lines:
        piece = doc.text[ln.start : ln.end]
        assert 150 < len(piece) <= 200 or ln is lines[-1]
        assert piece.startswith("word") and not piece.endswith(" ")
