"""Retrieval service vs in-process Browser: search latency and throughput, side by side, in one run.

The service (``python -m corpus.service``) runs in its own process on loopback, as it would next to a
trainer; the in-process numbers use the same corpus in this process.  Both are measured with one
client (latency) and with ``--clients`` concurrent clients (throughput).  The machine is shared and
noisy: read the ratios, not the absolute numbers.

    python bench/service.py                       # builds a small factbook corpus in a temp dir
    python bench/service.py --corpus DIR --retriever bm25 --requests 400 --clients 8 --rounds 3

The raw JSON (every round's latencies and QPS of both backends) goes to docs/results/bench/.
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# the repository first: this folder's corpus.py (another bench) would shadow the corpus package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests  # noqa: E402

from bench.raw import add_raw_flags, write_raw  # noqa: E402
from corpus.service import RemoteBrowser  # noqa: E402


def build_small_corpus(out: Path, n_docs: int) -> None:
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    build_corpus(out=out, documents=list(itertools.islice(factbook_documents(), n_docs)), progress=False)


def start_service(corpus: Path, retriever: str) -> tuple[subprocess.Popen, str]:
    """Start ``python -m corpus.service`` on a free loopback port; return it and its URL once healthy."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "corpus.service", str(corpus), "--port", "0", "--retriever", retriever],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        if m:
            url = m.group(1)
            break
    else:
        raise RuntimeError(f"the service exited before it was ready (rc={proc.wait()})")
    while requests.get(f"{url}/health", timeout=5).status_code != 200:
        time.sleep(0.1)
    return proc, url


def measure(make_browser: Callable, queries: list[str], n_requests: int, clients: int) -> dict[str, float]:
    """Latency (ms, p50/p95) and throughput (queries/s) of ``search`` with ``clients`` threads."""
    per_client = max(n_requests // clients, 1)
    browsers = [make_browser() for _ in range(clients)]
    for b in browsers:
        b.search(queries[0])  # warm up: connections, lazy model loads

    def run(i: int) -> list[float]:
        b, lat = browsers[i], []
        for j in range(per_client):
            t = time.perf_counter()
            b.search(queries[(i * per_client + j) % len(queries)], k=5)
            lat.append(time.perf_counter() - t)
        return lat

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        lats = sorted(x for lat in pool.map(run, range(clients)) for x in lat)
    wall = time.perf_counter() - t0
    return {
        "p50_ms": 1000 * statistics.median(lats),
        "p95_ms": 1000 * lats[int(0.95 * (len(lats) - 1))],
        "qps": len(lats) / wall,
        "n": len(lats),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--corpus", type=Path, help="an existing corpus directory (default: build a small one)"
    )
    parser.add_argument("--docs", type=int, default=60, help="factbook documents in the default corpus")
    parser.add_argument("--retriever", default="hybrid")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both backends at both client counts "
                        "(alternating which goes first); the verdict is the median of the rounds' ratios")
    add_raw_flags(parser)
    args = parser.parse_args(argv)

    from corpus import open_corpus

    counts = (1, args.clients)
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = Path(tmp) / "corpus"
            print(f"building a {args.docs}-document factbook corpus ...", file=sys.stderr, flush=True)
            build_small_corpus(corpus, args.docs)
        local = open_corpus(corpus, retriever=args.retriever)
        queries = [f"{c} capital population" for c in ("France", "Kenya", "Peru", "Japan", "Chile")]
        queries += [h.title for h in local.search("border countries", k=20)]
        proc, url = start_service(corpus, args.retriever)
        try:
            for r in range(max(1, args.rounds)):
                rnd: dict[str, dict[str, dict[str, float]]] = {"in-process": {}, "service": {}}
                for clients in counts:
                    n = args.requests if clients > 1 else max(args.requests // 2, 1)
                    order = ("in-process", "service") if r % 2 == 0 else ("service", "in-process")
                    for name in order:
                        make = local.fork if name == "in-process" else (lambda: RemoteBrowser(url))
                        rnd[name][str(clients)] = measure(make, queries, n, clients)
                rounds.append(rnd)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    what = str(args.corpus) if args.corpus else f"{args.docs} factbook docs"
    print(f"\nsearch, retriever={args.retriever}, corpus={what}, {len(rounds)} round(s)")
    print(f"{'round':>5} {'backend':<11} {'clients':>7} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'QPS':>8}")
    for i, rnd in enumerate(rounds, 1):
        for name in ("in-process", "service"):
            for clients in counts:
                m = rnd[name][str(clients)]
                print(f"{i:>5} {name:<11} {clients:>7} {m['n']:>8} {m['p50_ms']:>8.2f} {m['p95_ms']:>8.2f} "
                      f"{m['qps']:>8.1f}")
    for clients in counts:
        lat = [r["service"][str(clients)]["p50_ms"] / r["in-process"][str(clients)]["p50_ms"] for r in rounds]
        qps = [r["service"][str(clients)]["qps"] / r["in-process"][str(clients)]["qps"] for r in rounds]
        print(f"{clients} client(s): service / in-process p50 latency {statistics.median(lat):.2f}x "
              f"({' / '.join(f'{x:.2f}' for x in lat)}), throughput {statistics.median(qps):.2f}x "
              f"({' / '.join(f'{x:.2f}' for x in qps)})")
    write_raw("service", args, {"corpus": what, "clients": list(counts), "queries": len(queries), "rounds": rounds},
              variant=args.retriever)
    return 0

if __name__ == "__main__":
    sys.exit(main())
