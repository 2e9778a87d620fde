"""Benchmark the corpus package against its references, in one run, on the default corpus.

    python bench/corpus.py [--corpus DIR] [--build-docs 300] [--k 5]

Prints
1. build throughput (chunks/s) of ``build_corpus`` next to bare sentence-transformers ``encode`` (float32,
   what a user would write) on the same chunk texts (a sample of the default corpus, built into a
   temporary directory), and how close the built vectors are to bare encode's (the build may embed in
   bfloat16, see ``corpus/embed.py``);
2. search latency p50/p95 and QPS of ``LocalBrowser.search`` in dense, bm25 and hybrid mode, next to
   bare ``faiss`` ``index.search`` on pre-computed query vectors, bare ``bm25s`` retrieval, and the
   query encode time;
3. retrieval quality on questions built from the Factbook ("What is the capital of X?" → X's
   profile): recall@1 and recall@5 per mode.

The machine is shared and noisy: read the figures as ratios within one run.  The raw JSON (every
round's build and encode seconds, every query's latency on every path) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench.raw import add_raw_flags, write_raw  # noqa: E402
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


def bench_build(browser, n_docs: int, batch_size: int, rounds: int = 1) -> dict:
    docs = [d for d in browser.documents() if d.meta.get("source") == "wikipedia-vital"][:n_docs]
    docs += [d for d in browser.documents() if d.meta.get("source") == "factbook"][: max(1, n_docs // 30)]
    chunking = browser.manifest.get("chunking") or {}
    cc, oc = chunking.get("chunk_chars", 800), chunking.get("overlap_chars", 120)
    texts = [index_text(d.title, d.text[s:e]) for d in docs for s, e in chunk_text_spans(d.text, cc, oc)]
    Embedder()  # load the model once, outside both timings
    from sentence_transformers import SentenceTransformer

    from corpus.embed import default_embedder_path

    bare = SentenceTransformer(default_embedder_path(), device="cpu")
    import faiss

    build_times, bare_times, cos = [], [], None
    for _ in range(rounds):  # alternate, so a slow spell of the shared machine hits both sides of a round
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            m = build_corpus(out=Path(tmp) / "sample", documents=docs, progress=False, batch_size=batch_size)
            build_times.append(time.perf_counter() - t0)
            index = faiss.read_index(str(Path(tmp) / "sample" / "dense.faiss"))
            built = index.reconstruct_n(0, index.ntotal) if m["index"]["dense"] == "flat" else None
        t0 = time.perf_counter()
        ref = bare.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        bare_times.append(time.perf_counter() - t0)
        if built is not None:
            cos = (np.asarray(built) * ref).sum(axis=1)
    n = m["counts"]["chunks"]
    assert n == len(texts)
    dtype = m["embedder"].get("dtype", "float32")
    print(f"\nBuild throughput ({len(docs)} documents, {n} chunks of the default corpus, {rounds} alternating rounds)")
    for i, (b, r) in enumerate(zip(build_times, bare_times, strict=True), 1):
        print(f"  round {i}: build_corpus {n / b:6.1f} chunks/s ({dtype}), bare encode {n / r:6.1f} chunks/s "
              f"(float32): {r / b:.2f}x")
    build_s, bare_s = statistics.median(build_times), statistics.median(bare_times)
    print(f"  build_corpus (read+chunk+embed+index+write) {n / build_s:8.1f} chunks/s   (median {build_s:.1f} s, {dtype})")
    print(f"  bare SentenceTransformer.encode             {n / bare_s:8.1f} chunks/s   (median {bare_s:.1f} s, float32)")
    print(f"  ratio build / bare encode                   "
          f"{statistics.median(r / b for b, r in zip(build_times, bare_times, strict=True)):8.2f}  (median of rounds)")
    if cos is not None:
        print(f"  cosine of the built vectors to bare encode's: min {cos.min():.5f}, mean {cos.mean():.6f}")
    mb = browser.manifest.get("build") or {}
    if mb:
        print(
            f"  (the default corpus itself: {browser.manifest['counts']['chunks']} chunks in {mb.get('seconds')} s "
            f"= {mb.get('chunks_per_s')} chunks/s when it was built)"
        )
    return {"documents": len(docs), "chunks": n, "dtype": dtype, "build_s": build_times, "bare_s": bare_times,
            "cosine_min": float(cos.min()) if cos is not None else None,
            "cosine_mean": float(cos.mean()) if cos is not None else None}


def bench_search(browser, queries: list[str], k: int) -> dict:
    """Each query runs through every path in turn (the three modes, then the bare references), so a
    slow spell of the shared machine lands on all of them alike."""
    import bm25s

    print(f"\nSearch latency ({len(queries)} queries, k={k}, one at a time, the paths interleaved per query)")
    for q in queries:  # every query length once through the encoder and both indexes, before any timing
        browser.search(q, k=k, mode="hybrid")
    c = browser._c  # noqa: SLF001 - the bare references use the very same loaded indexes
    model = c.embedder.model
    times: dict[str, list[float]] = {name: [] for name in (*MODES, "encode", "faiss", "bm25s")}
    for i, q in enumerate(queries):
        for mode in MODES[i % 3:] + MODES[: i % 3]:  # each mode goes first a third of the time
            t0 = time.perf_counter()
            browser.search(q, k=k, mode=mode)
            times[mode].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        qv = model.encode([q], normalize_embeddings=True, show_progress_bar=False)
        times["encode"].append(time.perf_counter() - t0)
        qv = np.ascontiguousarray(qv, dtype=np.float32)
        t0 = time.perf_counter()
        c.dense.search(qv, k)
        times["faiss"].append(time.perf_counter() - t0)
        tokens = bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False)
        t0 = time.perf_counter()
        c.sparse.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        times["bm25s"].append(time.perf_counter() - t0)
    for mode in MODES:
        print(latency_row(f"LocalBrowser.search {mode}", times[mode]))
    bare = [a + b for a, b in zip(times["encode"], times["faiss"], strict=True)]
    print(latency_row("bare encode (1 query)", times["encode"]))
    print(latency_row(f"bare faiss index.search ({browser.manifest['index']['dense']})", times["faiss"]))
    print(latency_row("bare encode + faiss search", bare))
    print(latency_row("bare bm25s retrieve (pre-tokenized)", times["bm25s"]))
    print(f"  dense / (bare encode + faiss) p50: {pct(times['dense'], 50) / pct(bare, 50):.2f}x   "
          f"bm25 / bare bm25s p50: {pct(times['bm25'], 50) / pct(times['bm25s'], 50):.2f}x")
    return {"queries": len(queries), "k": k, "dense_index": browser.manifest["index"]["dense"], "seconds": times}


def bench_quality(browser, questions: list[tuple[str, str, set[str]]]) -> dict:
    print(
        f"\nRetrieval quality: {len(questions)} Factbook questions 'What is the capital of X?' -> X's profile"
    )
    print("  (lenient: the Wikipedia article on X or on its capital also counts)")
    out = {}
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
        out[mode] = {"n": n, "recall@1": r1 / n, "recall@5": r5 / n, "lenient@1": l1 / n, "lenient@5": l5 / n}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", help="corpus directory (default: the default corpus, built if missing)")
    ap.add_argument("--build-docs", type=int, default=300, help="documents in the build-throughput sample")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--build-rounds", type=int, default=3, help="alternating build / bare-encode rounds")
    ap.add_argument("--parts", default="build,search,quality", help="which parts to run, comma separated")
    add_raw_flags(ap)
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
    parts = {p.strip() for p in a.parts.split(",")}
    raw: dict = {"corpus": {"path": str(browser.path), "documents": m["counts"]["documents"],
                            "chunks": m["counts"]["chunks"], "embedder": m["embedder"]}}
    if "build" in parts:
        raw["build"] = bench_build(browser, a.build_docs, a.batch_size, a.build_rounds)
    if "search" in parts:
        raw["search"] = bench_search(browser, [q for q, _, _ in questions], a.k)
    if "quality" in parts:
        raw["quality"] = bench_quality(browser, questions)
    write_raw("corpus", a, raw, variant=Path(browser.path).name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
