"""G3: compare eval runs side by side — a table and two plots (metrics bars, evidence funnel).

Typical use is base vs SFT vs RL on the same benchmark.  Runs on *different* benchmarks or
subsets are still tabulated, but a warning is printed: their numbers are not comparable.  A run
whose answers were made by more than one version of the code (an eval resumed after the code
changed) is refused, since its numbers belong to no one version; ``allow_mixed_code`` compares it
anyway and flags it in the tables.  Each run's code is listed under the table.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from corpus.packages import FetchError
from eval.benchmarks import BenchmarkFormatError, UnknownBenchmark, load_benchmark
from eval.kinds import kind_scores, kind_table
from eval.metrics import FUNNEL_STAGES
from eval.paired import paired_stats, paired_table, run_scores
from eval.rundir import RunDirError, load_results
from eval.runner import UNRECORDED, answer_code, short_code
from research_agent.store import TrajectoryStore

# Rows of the table, in reading order: accuracy, honesty, evidence, effort.
TABLE_METRICS = (
    "n",
    "em",
    "f1",
    "answer_rate",
    "abstain_rate",
    "incorrect_rate",
    "abstention_unanswerable",
    "citation_precision",
    "citation_recall",
    "support_rate",
    *(f"funnel_{s}_rate" for s in FUNNEL_STAGES),
    "turns",
    "searches",
    "opens",
    "finds",
    "invalid_turns",
    "generated_tokens",
    "seconds",
)
BAR_METRICS = ("em", "f1", "answer_rate", "citation_precision", "citation_recall")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 1 else f"{value:.3f}"
    return str(value)


def format_table(labels: list[str], metrics: list[dict[str, float]]) -> str:
    """A Markdown table: one row per metric, one column per run ('-' where undefined)."""
    rows = [m for m in TABLE_METRICS if any(m in r for r in metrics)]
    header = ["metric", *labels]
    body = [[m, *(_fmt(r.get(m)) for r in metrics)] for m in rows]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in body)])


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: eval runs on servers without a display
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Save through a temp file and rename, like every other artifact (readers never see half a PNG)."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


def plot_metrics(labels: list[str], metrics: list[dict[str, float]], path: Path) -> Path:
    """Grouped bars of the rate metrics, one colour per run."""
    plt = _pyplot()
    names = [m for m in BAR_METRICS if any(m in r for r in metrics)]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(names)), 4))
    width = 0.8 / max(1, len(labels))
    for i, (label, r) in enumerate(zip(labels, metrics, strict=True)):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [r.get(m, 0.0) for m in names], width, label=label)
    ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(names))], names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("rate")
    ax.set_title("QA metrics by run")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
    return path


def plot_funnel(labels: list[str], metrics: list[dict[str, float]], path: Path) -> Path:
    """Evidence funnel: share of questions whose gold passage reached each stage, one line per run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, r in zip(labels, metrics, strict=True):
        if r.get("funnel_n", 0) > 0:
            ax.plot(
                FUNNEL_STAGES,
                [r.get(f"funnel_{s}_rate", 0.0) for s in FUNNEL_STAGES],
                marker="o",
                label=f"{label} (n={r['funnel_n']:.0f})",
            )
    if not ax.lines:
        ax.text(0.5, 0.5, "no run has known gold passages", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend()
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of questions")
    ax.set_title("Evidence funnel (gold passage)")
    fig.tight_layout()
    save_figure(fig, path)
    return path


class MixedCodeError(RunDirError):
    """A run to compare holds answers made by different versions of the code."""


def code_lines(labels: list[str], codes: list[dict[str, int]]) -> str:
    """Which code made each run's answers, one line per run (mixed runs flagged)."""
    lines = ["Code that made the answers:", ""]
    for label, c in zip(labels, codes, strict=True):
        parts = ", ".join(f"{n} by {short_code(k)}" if k != UNRECORDED else f"{n} not recorded" for k, n in c.items())
        flag = "**mixed code**: " if len(c) > 1 else ""
        lines.append(f"- {label}: {flag}{parts}")
    return "\n".join(lines)


def setting_differences(labels: list[str], results: list[dict[str, Any]]) -> str:
    """The agent settings (budgets, template, sampling) in which the runs differ, as a line for the
    tables, or "".  Commands default differently (``eval qa`` 6 turns, the research preset and the
    shipped agents 10), so two runs can silently answer under different budgets."""
    configs = [r.get("agent_config") or {} for r in results]
    shared = set.intersection(*(set(c) for c in configs)) if configs else set()
    differ = [k for k in sorted(shared) if len({repr(c[k]) for c in configs}) > 1]
    if not differ:
        return ""
    values = "; ".join(f"{k}: " + ", ".join(f"{label} {c[k]}" for label, c in zip(labels, configs, strict=True))
                       for k in differ)
    return f"**Agent settings differ** ({values}): these runs are not at equal budgets."


def asked_questions(results: dict[str, Any]) -> set[str] | None:
    """The ids a run asked: recorded in its results, else what its benchmark selects today (a run
    made before the ids were recorded); None (every answer in the directory) if neither is known."""
    if results.get("question_ids") is not None:
        return set(results["question_ids"])
    bench = results.get("bench")
    if not bench:
        return None
    try:
        items, _ = load_benchmark(bench, results.get("limit"), results.get("seed") or 0, path=results.get("bench_file"))
    except (FetchError, UnknownBenchmark, BenchmarkFormatError, OSError, ValueError):
        return None  # a benchmark that cannot be loaded here: pair every answer, as before
    return {str(it["id"]) for it in items} if len(items) == results.get("n_items") else None


def compare_runs(run_dirs: list[str | Path], out_dir: str | Path, *, allow_mixed_code: bool = False) -> str:
    """Load each run's results, write ``table.md``, ``metrics.png``, ``funnel.png``, (two runs or
    more) ``paired.md``, each later run against the first question by question, and (when the gold
    names question kinds) ``by_kind.md``; return the tables.

    Raises ``MixedCodeError`` when a run's answers come from more than one version of the code,
    unless ``allow_mixed_code`` (then the tables say so)."""
    if not run_dirs:
        raise ValueError("give at least one run directory to compare")
    dirs = [Path(d) for d in run_dirs]
    results = [load_results(d) for d in dirs]
    labels = [d.name or str(d) for d in dirs]
    if len(set(labels)) != len(labels):
        labels = [str(d) for d in dirs]
    benches = {(r.get("bench"), r.get("limit"), r.get("seed")) for r in results}
    if len(benches) > 1:
        print(
            f"warning: runs differ in benchmark/limit/seed {sorted(map(str, benches))}; "
            "their numbers are not directly comparable",
            file=sys.stderr,
        )
    settings = setting_differences(labels, results)
    if settings:
        print(f"warning: {settings.replace('**', '')}", file=sys.stderr)
    asked = [asked_questions(r) for r in results]
    codes = [answer_code([t for t in TrajectoryStore(d).load() if a is None or t.id in a])
             for d, a in zip(dirs, asked, strict=True)]
    mixed = [(label, c) for label, c in zip(labels, codes, strict=True) if len(c) > 1]
    if mixed and not allow_mixed_code:
        label, c = mixed[0]
        raise MixedCodeError(
            f"{label}: its answers were made by {len(c)} versions of the code ("
            + ", ".join(f"{n} by {short_code(k)}" if k != UNRECORDED else f"{n} not recorded" for k, n in c.items())
            + "), an eval resumed after the code changed; re-run it into a new --out, or compare anyway "
            "with --allow-mixed-code (the tables flag it)"
        )
    for label, _ in mixed:
        print(f"warning: {label}'s answers come from more than one version of the code; flagged in the tables",
              file=sys.stderr)
    metrics = [r["metrics"] for r in results]
    table = format_table(labels, metrics) + "\n\n" + code_lines(labels, codes)
    if settings:
        table += "\n\n" + settings
    out = Path(out_dir)
    atomic_write_text(out / "table.md", table + "\n")
    plot_metrics(labels, metrics, out / "metrics.png")
    plot_funnel(labels, metrics, out / "funnel.png")
    if len(dirs) > 1:  # every later run paired against the first, question by question
        base = run_scores(dirs[0], asked[0])
        stats = [paired_stats(base, run_scores(d, a)) for d, a in zip(dirs[1:], asked[1:], strict=True)]
        paired = paired_table(labels[1:], stats, labels[0])
        if mixed:
            paired += "\n\n" + "\n".join(f"**{label}'s answers come from mixed code**: its pairs are not one "
                                         "version's" for label, _ in mixed)
        atomic_write_text(out / "paired.md", paired + "\n")
        table += "\n\n" + paired
    by_kind = kind_table(labels, [kind_scores(d, a) for d, a in zip(dirs, asked, strict=True)])
    if by_kind:
        atomic_write_text(out / "by_kind.md", by_kind + "\n")
        table += "\n\n" + by_kind
    return table
