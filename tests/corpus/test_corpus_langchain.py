"""``CorpusRetriever`` with the real langchain-core over the session corpus: the Browser's ranking as
``Document``s carrying chunk ids and offsets, in chains, batches and async calls."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core", reason="langchain-core comes with langgraph")
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from corpus.browser import QueryError  # noqa: E402
from corpus.langchain import CorpusRetriever  # noqa: E402
from corpus.store import CorpusError  # noqa: E402

QUERY = "What is the capital of Kenya?"


@pytest.fixture(scope="module")
def retriever(small_corpus):
    return CorpusRetriever(corpus=str(small_corpus.path), k=3)


def test_documents_are_the_browsers_hits_with_ids_titles_and_offsets(retriever, browser):
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke(QUERY)
    hits = browser.search(QUERY, k=3)
    assert all(isinstance(d, Document) for d in docs)
    assert [d.metadata["chunk_id"] for d in docs] == [h.chunk_id for h in hits]
    assert docs[0].metadata["doc_id"] == "factbook/ke"
    for doc, hit in zip(docs, hits, strict=True):
        assert doc.id == hit.chunk_id
        assert doc.metadata["title"] == hit.title and doc.metadata["url"] == hit.url
        assert doc.metadata["score"] == hit.score
        assert doc.page_content == browser.chunk_text(hit.chunk_id)  # the whole chunk, not the snippet
        start, end = doc.metadata["start"], doc.metadata["end"]
        assert browser.document(hit.doc_id).text[start:end] == doc.page_content


def test_k_per_call_and_modes(retriever, small_corpus, browser):
    assert len(retriever.invoke(QUERY, k=1)) == 1
    assert len(retriever.invoke("capital", k=500)) == 50  # the Browser's cap
    bm25 = CorpusRetriever(corpus=str(small_corpus.path), k=5, mode="bm25")
    query = "spring tides and neap tides moon"
    assert [d.metadata["chunk_id"] for d in bm25.invoke(query)] == [
        h.chunk_id for h in browser.search(query, k=5, mode="bm25")]


def test_an_open_browser_can_be_shared(browser):
    docs = CorpusRetriever(browser=browser, k=2).invoke("Karl von Frisch Nobel Prize 1973")
    assert docs[0].metadata["doc_id"] == "html/frisch.html"


def test_it_composes_batches_and_runs_async(retriever):
    chain = retriever | RunnableLambda(lambda docs: [d.metadata["doc_id"] for d in docs])
    assert chain.invoke(QUERY)[0] == "factbook/ke"
    batched = retriever.batch([QUERY, "most expensive spice harvested from crocus flowers"])
    assert [docs[0].metadata["doc_id"] for docs in batched] == ["factbook/ke", "rec-saffron"]
    docs = asyncio.run(retriever.ainvoke(QUERY))
    assert docs[0].metadata["doc_id"] == "factbook/ke"


def test_errors_are_the_browsers(retriever, tmp_path):
    with pytest.raises(QueryError, match="empty query"):
        retriever.invoke("   ")
    with pytest.raises(QueryError, match="k must be a positive integer"):
        retriever.invoke(QUERY, k=0)
    with pytest.raises(ValidationError):
        CorpusRetriever(browser=retriever.browser, k=0)
    with pytest.raises(ValidationError):
        CorpusRetriever(browser=retriever.browser, mode="telepathy")
    with pytest.raises(CorpusError):
        CorpusRetriever(corpus=str(tmp_path / "nothing"))
