"""Benchmark the corpus package against its references, in one run, on the default corpus.

    python bench/corpus.py [--corpus DIR] [--build-docs 300] [--k 5]

Prints
1. build throughput (chunks/s) of ``build_corpus`` next to bare sentence-transformers ``encode`` on the
   same chunk texts (a sample of the default corpus, built into a temporary directory);
2. search latency p50/p95 and QPS of ``LocalBrowser.search`` in dense, bm25 and hybrid mode, next to
   bare ``faiss`` ``index.search`` on pre-computed query vectors, bare ``bm25s`` retrieval, and the
   query encode time;
3. retrieval quality on questions built from the Factbook ("What is the capital of X?" → X's
   profile): recall@1 and recall@5 per mode.

The machine is shared and noisy: read the figures as ratios within one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from corpus import build_corpus, open_corpus  # noqa: E402
from corpus.build import index_text  # noqa: E402  (what build_corpus embeds for a chunk)
from corpus.chunk import chunk_text_spans  # noqa: E402
from corpus.embed import Embedder  # noqa: E402

MODES = ("dense", "bm25", "hybrid")


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p)) if values else float("nan")


def latency_row(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    qps = len(seconds) / sum(seconds) if sum(seconds) else float("inf")
    return f"  {name:<34} p50 {pct(ms, 50):8.2f} ms   p95 {pct(ms, 95):8.2f} ms   {qps:9.1f} q/s"


def capital_questions(browser) -> list[tuple[str, str, set[str]]]:
    """(question, the profile's doc id, doc ids also accepted: the Wikipedia articles on X and its capital)."""
    qs = []
    for doc in browser.documents():
        if doc.meta.get("source") == "factbook" and doc.meta.get("capital"):
            also = {f"wiki/{doc.title.replace(' ', '_')}", f"wiki/{doc.meta['capital'].replace(' ', '_')}"}
            qs.append((f"What is the capital of {doc.title}?", doc.id, also))
    return qs


def bench_build(browser, n_docs: int, batch_size: int) -> None:
    docs = [d for d in browser.documents() if d.meta.get("source") == "wikipedia-vital"][:n_docs]
    docs += [d for d in browser.documents() if d.meta.get("source") == "factbook"][: max(1, n_docs // 30)]
    chunking = browser.manifest.get("chunking") or {}
    cc, oc = chunking.get("chunk_chars", 800), chunking.get("overlap_chars", 120)
    texts = [index_text(d.title, d.text[s:e]) for d in docs for s, e in chunk_text_spans(d.text, cc, oc)]
    Embedder()  # load the model once, outside both timings
    from sentence_transformers import SentenceTransformer

    from corpus.embed import default_embedder_path

    bare = SentenceTransformer(default_embedder_path(), device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        m = build_corpus(out=Path(tmp) / "sample", documents=docs, progress=False, batch_size=batch_size)
        build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    bare.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    bare_s = time.perf_counter() - t0
    n = m["counts"]["chunks"]
    assert n == len(texts)
    print(f"\nBuild throughput ({len(docs)} documents, {n} chunks of the default corpus)")
    print(f"  build_corpus (read+chunk+embed+index+write) {n / build_s:8.1f} chunks/s   ({build_s:.1f} s)")
    print(f"  bare SentenceTransformer.encode             {n / bare_s:8.1f} chunks/s   ({bare_s:.1f} s)")
    print(f"  ratio build / bare encode                   {bare_s / build_s:8.2f}")
    mb = browser.manifest.get("build") or {}
    if mb:
        print(
            f"  (the default corpus itself: {browser.manifest['counts']['chunks']} chunks in {mb.get('seconds')} s "
            f"= {mb.get('chunks_per_s')} chunks/s when it was built)"
        )


def bench_search(browser, queries: list[str], k: int) -> None:
    print(f"\nSearch latency ({len(queries)} queries, k={k}, one at a time)")
    browser.search("warm up", k=k, mode="hybrid")
    for mode in MODES:
        times = []
        for q in queries:
            t0 = time.perf_counter()
            browser.search(q, k=k, mode=mode)
            times.append(time.perf_counter() - t0)
        print(latency_row(f"LocalBrowser.search {mode}", times))
    c = browser._c  # noqa: SLF001 - the bare references use the very same loaded indexes
    emb = c.embedder
    enc = []
    for q in queries:
        t0 = time.perf_counter()
        emb.model.encode([q], normalize_embeddings=True, show_progress_bar=False)
        enc.append(time.perf_counter() - t0)
    qv = emb.encode(queries)
    bare = []
    for i in range(len(queries)):
        t0 = time.perf_counter()
        c.dense.search(qv[i : i + 1], k)
        bare.append(time.perf_counter() - t0)
    import bm25s

    tokens = [bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False) for q in queries]
    bm = []
    for t in tokens:
        t0 = time.perf_counter()
        c.sparse.retriever.retrieve(t, k=k, show_progress=False, n_threads=1)
        bm.append(time.perf_counter() - t0)
    print(latency_row("bare encode (1 query)", enc))
    print(latency_row(f"bare faiss index.search ({browser.manifest['index']['dense']})", bare))
    print(latency_row("bare encode + faiss search", [a + b for a, b in zip(enc, bare, strict=True)]))
    print(latency_row("bare bm25s retrieve (pre-tokenized)", bm))


def bench_quality(browser, questions: list[tuple[str, str, set[str]]]) -> None:
    print(
        f"\nRetrieval quality: {len(questions)} Factbook questions 'What is the capital of X?' -> X's profile"
    )
    print("  (lenient: the Wikipedia article on X or on its capital also counts)")
    for mode in MODES:
        r1 = r5 = l1 = l5 = 0
        for q, gold, also in questions:
            ids = [h.doc_id for h in browser.search(q, k=5, mode=mode)]
            r1 += ids[:1] == [gold]
            r5 += gold in ids
            l1 += bool(ids[:1]) and ids[0] in also | {gold}
            l5 += bool(set(ids) & (also | {gold}))
        n = len(questions)
        print(
            f"  {mode:<7} recall@1 {r1 / n:.3f}   recall@5 {r5 / n:.3f}   "
            f"lenient recall@1 {l1 / n:.3f}   recall@5 {l5 / n:.3f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", help="corpus directory (default: the default corpus, built if missing)")
    ap.add_argument("--build-docs", type=int, default=300, help="documents in the build-throughput sample")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    a = ap.parse_args()
    t0 = time.perf_counter()
    browser = open_corpus(a.corpus)
    load_s = time.perf_counter() - t0
    m = browser.manifest
    print(
        f"corpus {browser.path}: {m['counts']['documents']} documents, {m['counts']['chunks']} chunks, "
        f"{m['index']['dense']} index, {m['embedder']['name']}; opened in {load_s:.2f} s"
    )
    questions = capital_questions(browser)
    bench_build(browser, a.build_docs, a.batch_size)
    bench_search(browser, [q for q, _, _ in questions], a.k)
    bench_quality(browser, questions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
