"""Does the code agent's docs search return the API a task needs? Hit rate of the right API in the top k.

The model never searched in the measured code runs; before teaching it to, the search must be worth
calling. For each task with a reference solution, the library calls the reference makes (``pd.merge``,
``df.groupby``, ``np.where``) are the APIs a model would look up. Each becomes the query the code
demonstrations teach (``research_agent.code.demos.library_calls``: "pandas merge", "pandas DataFrame
groupby"), and a search counts as a hit when one of its top k results documents that API: a document
of the call's library whose name ends in the called name (``pandas.DataFrame.groupby``,
``pandas.core.groupby.DataFrameGroupBy.agg``). A class page that only lists the method does not count:
the model sees the first ``HIT_CHARS`` of each hit, which rarely reach the method.

    python -m eval docs-hits --tasks dataframebench:test --k 3 --out runs/docs-hits.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from eval.rundir import write_json


def is_right(title: str, library: str, name: str) -> bool:
    """Whether a hit titled ``title`` documents ``library``'s ``name``."""
    parts = title.split(".")
    return parts[-1] == name and parts[0] == library.split(".")[0]


def docs_hits(tasks: list, browser: Any, k: int = 3) -> dict[str, Any]:
    """Search every (task, library call) of the tasks' references; the hit rate, per call and overall."""
    from research_agent.code.demos import library_calls, reference_code

    rows = []
    for task in tasks:
        code = reference_code(task)
        if not code:
            continue
        for library, name, query in library_calls(code):
            hits = browser.search(query, k=k)
            titles = [h.title for h in hits]
            rank = next((i for i, t in enumerate(titles, 1) if is_right(t, library, name)), None)
            rows.append({"task": task.id, "library": library, "name": name, "query": query,
                         "hits": titles, "rank": rank})
    found = sum(r["rank"] is not None for r in rows)
    missed = Counter(r["query"] for r in rows if r["rank"] is None)
    return {
        "k": k,
        "tasks": len({r["task"] for r in rows}),
        "queries": len(rows),
        "hit_rate": found / len(rows) if rows else 0.0,
        "first_rate": sum(r["rank"] == 1 for r in rows) / len(rows) if rows else 0.0,
        "tasks_with_a_hit": len({r["task"] for r in rows if r["rank"] is not None}),
        "most_missed": missed.most_common(15),
        "rows": rows,
    }


def report_text(report: dict[str, Any], where: str) -> str:
    lines = [
        f"docs search on {where}: {report['queries']} library calls of {report['tasks']} reference solutions",
        f"right API in the top {report['k']}: {report['hit_rate']:.1%}; first: {report['first_rate']:.1%}; "
        f"tasks with at least one hit: {report['tasks_with_a_hit']}/{report['tasks']}",
        "most missed (query × calls, what came back instead):",
    ]
    first_hits = {r["query"]: r["hits"] for r in report["rows"] if r["rank"] is None}
    for query, n in report["most_missed"]:
        lines.append(f"  {query!r} × {n}: {', '.join(first_hits[query]) or '(nothing)'}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from corpus.local import add_retriever_flag

    p = argparse.ArgumentParser(prog="python -m eval docs-hits", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="dataframebench:test", help="task spec, as for `eval code`")
    p.add_argument("--k", type=int, default=3, help="hits the search returns (the code agent shows 3)")
    p.add_argument("--docs", default=None, help="API-docs corpus directory (default: the cached one)")
    add_retriever_flag(p)
    p.add_argument("--out", default=None, help="write the report (every query, its hits and rank) as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from research_agent.code.apidocs import api_docs_browser
    from research_agent.code.tasks import load_tasks

    if args.k < 1:
        print("error: --k must be at least 1", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(args.tasks)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    browser = api_docs_browser(args.docs, retriever=args.retriever)
    report = docs_hits(tasks, browser, k=args.k)
    if not report["queries"]:
        print(f"error: no reference solution of {args.tasks} makes a library call to look up", file=sys.stderr)
        return 2
    text = report_text(report, args.tasks)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(out, {**report, "settings": {"tasks": args.tasks, "retriever": args.retriever,
                                                  "docs": str(getattr(browser, "path", ""))}})
        atomic_write_text(out.with_suffix(".txt"), text + "\n")
    return 0
