"""``CorpusRetriever``: a corpus as a LangChain retriever, for chains and agents built with LangChain.

```python
from corpus.langchain import CorpusRetriever
retriever = CorpusRetriever(corpus="DIR", k=4)          # corpus=None: the default corpus
docs = retriever.invoke("What is the capital of Kenya?")
docs[0].metadata  # {"chunk_id": "factbook/ke#0", "doc_id": ..., "title": ..., "start": 0, "end": 812, ...}
```

Each ``Document`` is one chunk as the Browser ranks it (hybrid dense + BM25 by default), with its
whole text as ``page_content`` (a search hit's snippet is only the part around the query words) and
where it sits in its document as character offsets, so an answer built on it can cite the chunk id
the agent, the evaluation and ``python -m corpus open`` all use.  Needs ``langchain-core``
(``pip install 'research-agent[langchain]'``; LangGraph already brings it).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from corpus.browser import Hit
from corpus.documents import Chunk, split_chunk_id

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as e:  # an optional extra: say how to get it
    raise ImportError(f"CorpusRetriever needs langchain-core ({e}): pip install 'research-agent[langchain]'") from e


class CorpusRetriever(BaseRetriever):
    """The ``k`` best chunks of a corpus for a query, as LangChain ``Document``s.

    ``corpus`` is a directory built by ``python -m corpus build`` (None: the default corpus, built on
    first use); ``mode`` is how its search ranks (dense, bm25 or hybrid).  Or pass an open
    ``browser`` (a ``LocalBrowser``) to share one already loaded; ``mode`` is then the browser's own.
    ``invoke(query, k=N)`` overrides ``k`` for one call.  Errors are the Browser's: an empty query
    or a bad ``k`` raises ``QueryError``, a directory that is no corpus ``CorpusError``.
    """

    corpus: str | None = None
    k: int = Field(default=4, ge=1, le=50)
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    browser: Any = Field(default=None, exclude=True, repr=False)

    def model_post_init(self, context: Any) -> None:
        if self.browser is None:
            from corpus import open_corpus

            self.browser = open_corpus(self.corpus, retriever=self.mode)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        hits = self.browser.search(query, k=self.k if k is None else k)
        return [self._document(hit) for hit in hits]

    def _document(self, hit: Hit) -> Document:
        metadata: dict[str, Any] = {"chunk_id": hit.chunk_id, "doc_id": hit.doc_id, "title": hit.title,
                                    "url": hit.url, "source": hit.url or hit.doc_id, "score": hit.score}
        chunk = self._chunk(hit)
        if chunk is None:  # a browser that does not keep offsets (a retrieval service)
            return Document(page_content=self.browser.chunk_text(hit.chunk_id), metadata=metadata, id=hit.chunk_id)
        metadata.update(start=chunk.start, end=chunk.end)
        return Document(page_content=chunk.text, metadata=metadata, id=hit.chunk_id)

    def _chunk(self, hit: Hit) -> Chunk | None:
        """The hit's chunk with its offsets, from a browser that has ``chunks(doc_id)``."""
        chunks = getattr(self.browser, "chunks", None)
        parsed = split_chunk_id(hit.chunk_id)
        if chunks is None or parsed is None:
            return None
        found = chunks(hit.doc_id)
        return found[parsed[1]] if parsed[1] < len(found) else None
