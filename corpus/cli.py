"""``python -m corpus``: build, extend, search, open and describe corpora.

```
python -m corpus build --preset default --out DIR        # Wikipedia vital articles + Factbook
python -m corpus build PATH... --out DIR [--index hnsw]  # HTML / Markdown / text / JSONL files
python -m corpus add DIR PATH...                         # new documents; old ones are not re-embedded
python -m corpus search [DIR] "query" [-k 5] [--mode dense|bm25|hybrid]
python -m corpus open [DIR] DOC_ID [--page 2] [--find PATTERN [--regex]]
python -m corpus info [DIR]
python -m corpus serve DIR [--port 8765]                 # the retrieval service (corpus.service)
python -m corpus mcp [--corpus DIR] [--transport http]   # the Browser as an MCP server (corpus.mcp_server)
```
DIR (and ``--out``) default to the default corpus: ``$RESEARCH_AGENT_CORPUS`` or the per-user cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from corpus.browser import BrowserError
from corpus.store import CorpusError


def _default_dir() -> Path:
    from corpus import default_corpus_dir

    return default_corpus_dir()


def _dir_and(args_list: list[str]) -> tuple[Path, list[str]]:
    """``[DIR] X``: a leading directory, or the default corpus."""
    if len(args_list) >= 2:
        return Path(args_list[0]), args_list[1:]
    return _default_dir(), args_list


def _argv_text(value: str, what: str) -> str:
    """An argument as text: bytes of argv that are not UTF-8 (kept by Python as lone surrogates,
    which the tokenizer and the JSON writer refuse) become U+FFFD, with a note on stderr."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        clean = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that no undecodable byte made
        clean = value.encode("utf-8", "replace").decode("utf-8")
    print(
        f"note: the {what} has bytes that are not UTF-8; they are read as U+FFFD: {clean!r}", file=sys.stderr
    )
    return clean


def _cmd_build(a) -> int:
    from corpus.build import build_corpus
    from corpus.store import build_lock

    if not a.paths and not a.preset:
        print("error: give source paths or --preset (default, factbook, wikipedia-vital)", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else _default_dir()
    t0 = time.perf_counter()
    with build_lock(out):  # the same lock open_corpus() takes to build the default corpus
        m = build_corpus(
            a.paths,
            out,
            preset=a.preset,
            index_type=a.index,
            chunk_chars=a.chunk_chars,
            overlap_chars=a.overlap_chars,
            embedder=a.embedder,
            batch_size=a.batch_size,
            progress=not a.quiet,
        )
    c = m["counts"]
    print(
        f"{out}: {c['documents']} documents, {c['chunks']} chunks, {c['skipped']} skipped, "
        f"{m['index']['dense']} index, {time.perf_counter() - t0:.1f} s"
    )
    return 0


def _cmd_add(a) -> int:
    from corpus.build import add_documents

    m = add_documents(a.dir, a.paths, batch_size=a.batch_size, progress=not a.quiet)
    c = m["counts"]
    print(f"{a.dir}: now {c['documents']} documents, {c['chunks']} chunks ({c['skipped']} skipped in all)")
    return 0


def _cmd_search(a) -> int:
    from corpus.local import LocalBrowser

    root, rest = _dir_and(a.args)
    if len(rest) != 1:
        print('error: usage: python -m corpus search [DIR] "query"', file=sys.stderr)
        return 2
    query = _argv_text(rest[0], "query")
    browser = LocalBrowser(root, retriever=a.mode)
    t0 = time.perf_counter()
    hits = browser.search(query, k=a.k)
    dt = time.perf_counter() - t0
    if a.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return 0
    for i, h in enumerate(hits, 1):
        print(f"{i}. [{h.score:.4f}] {h.title}  ({h.chunk_id})")
        if h.url:
            print(f"   {h.url}")
        print(f"   {h.snippet}")
    print(f"({len(hits)} hits, {a.mode}, {dt * 1000:.0f} ms)", file=sys.stderr)
    return 0


def _cmd_open(a) -> int:
    from corpus.local import LocalBrowser

    root, rest = _dir_and(a.args)
    if len(rest) != 1:
        print("error: usage: python -m corpus open [DIR] DOC_ID", file=sys.stderr)
        return 2
    browser = LocalBrowser(root)
    page = browser.open(_argv_text(rest[0], "document id"), page=a.page)
    if a.find:
        for m in browser.find(_argv_text(a.find, "pattern"), regex=a.regex):
            print(f"L{m.line_no}: {m.text}    [{m.chunk_id}]")
        return 0
    print(f"{page.title} — {page.doc_id} {page.url}")
    print(
        f"page {page.page}/{page.total_pages}, lines {page.first_line}-{page.first_line + len(page.lines) - 1} "
        f"of {page.total_lines}"
    )
    print(page.numbered())
    return 0


def _cmd_info(a) -> int:
    from corpus.store import read_manifest

    root = Path(a.dir) if a.dir else _default_dir()
    m = read_manifest(root)
    if a.json:
        print(json.dumps(m, indent=2, ensure_ascii=False))
        return 0
    c = m["counts"]
    ch = m.get("chunking") or {}
    src = m.get("sources") or {}
    print(f"corpus     {root}")
    print(f"schema     {m['schema_version']}  built {m.get('created')}  updated {m.get('updated')}")
    print(f"embedder   {m['embedder']['name']} ({m['embedder']['dim']}-d)")
    print(
        f"index      {m['index']['dense']} (FAISS) + {m['index']['sparse']}, fused by {m['index'].get('fusion')}"
    )
    print(f"chunks     {ch.get('chunk_chars')} chars, overlap {ch.get('overlap_chars')}")
    print(f"counts     {c['documents']} documents, {c['chunks']} chunks, {c['skipped']} skipped")
    if src.get("preset"):
        print(f"preset     {src['preset']}")
    for p in src.get("paths") or []:
        print(f"path       {p}")
    for k, v in (src.get("hashes") or {}).items():
        print(f"hash       {k}  {v}")
    b = m.get("build") or {}
    if b:
        print(f"build      {b.get('seconds')} s ({b.get('chunks_per_s')} chunks/s)")
    print("versions   " + ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items()))
    for s in (m.get("skipped") or [])[:10]:
        print(f"skipped    {s['source']}: {s['reason']}")
    if c["skipped"] > 10:
        print(f"skipped    ... {c['skipped'] - 10} more (info --json lists them)")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m corpus",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build a corpus from a preset and/or files")
    b.add_argument("paths", nargs="*", help="files or directories (.html .md .txt .jsonl)")
    b.add_argument("--preset", choices=["default", "factbook", "wikipedia-vital"])
    b.add_argument("--out", help="corpus directory (default: $RESEARCH_AGENT_CORPUS or the per-user cache)")
    b.add_argument(
        "--index",
        default="flat",
        choices=["flat", "ivf", "hnsw"],
        help="FAISS index: flat is exact; ivf and hnsw are approximate, faster on large corpora",
    )
    b.add_argument("--chunk-chars", type=int, default=800)
    b.add_argument("--overlap-chars", type=int, default=120)
    b.add_argument(
        "--embedder", help="sentence-transformers folder or model id (default: packaged all-MiniLM-L6-v2)"
    )
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--device", default=None, type=_embed_device,
                   help="where the embedder runs: cpu (default) or cuda / cuda:N")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=_cmd_build)

    ad = sub.add_parser("add", help="add documents to a corpus without re-embedding the old ones")
    ad.add_argument("dir")
    ad.add_argument("paths", nargs="+")
    ad.add_argument("--batch-size", type=int, default=64)
    ad.add_argument("--quiet", action="store_true")
    ad.set_defaults(func=_cmd_add)

    s = sub.add_parser("search", help='search a corpus: search [DIR] "query"')
    s.add_argument("args", nargs="+", metavar="[DIR] QUERY")
    s.add_argument("-k", type=int, default=5)
    s.add_argument("--mode", default="hybrid", choices=["dense", "bm25", "hybrid"])
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_search)

    o = sub.add_parser("open", help="show a document as numbered lines: open [DIR] DOC_ID")
    o.add_argument("args", nargs="+", metavar="[DIR] DOC_ID")
    o.add_argument("--page", type=int, default=None)
    o.add_argument("--find", help="print the lines matching this pattern instead")
    o.add_argument("--regex", action="store_true")
    o.set_defaults(func=_cmd_open)

    i = sub.add_parser("info", help="describe a corpus from its manifest")
    i.add_argument("dir", nargs="?")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_cmd_info)

    sub.add_parser("serve", help="serve a corpus over HTTP: serve DIR [--port 8765] (corpus.service)")
    sub.add_parser("mcp", help="serve a corpus's search / open / find as MCP tools: mcp [--corpus DIR] "
                   "[--transport stdio|http] (corpus.mcp_server)")
    return p


def _embed_device(value: str) -> str:
    value = value.strip().lower()
    if value in ("cpu", "cuda") or re.fullmatch(r"cuda:\d+", value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: use cpu, cuda or cuda:N")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # the retrieval service has its own parser
        from corpus.service import main as serve_main

        return serve_main(argv[1:])
    if argv[:1] == ["mcp"]:  # so does the MCP server, an optional extra
        try:
            from corpus.mcp_server import main as mcp_main
        except ImportError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return mcp_main(argv[1:])
    a = _parser().parse_args(argv)
    if getattr(a, "device", None):
        os.environ["RESEARCH_AGENT_EMBED_DEVICE"] = a.device  # read by corpus.embed.Embedder
    try:
        return a.func(a)
    except (CorpusError, BrowserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
