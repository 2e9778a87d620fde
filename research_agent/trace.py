"""A self-contained HTML page of one research run: steps, documents, citations, timings.

For people who would rather look than read a JSON trajectory.  No scripts, no external assets:
the page opens anywhere, including a headless browser in a test.
"""

from __future__ import annotations

import html
import re

from corpus.files import atomic_write_text

from .trajectory import Trajectory

_CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}.step{border-left:4px solid #888;margin:1rem 0;padding:.3rem .8rem;background:#fafafa}
.search{border-color:#2a7ae2}.open{border-color:#2ca02c}.find{border-color:#ff7f0e}.answer{border-color:#9467bd}
.invalid{border-color:#d62728}pre{white-space:pre-wrap;font-size:.85rem;background:#f0f0f0;padding:.5rem}
.meta{color:#666;font-size:.85rem}.ok{color:#2ca02c}.bad{color:#d62728}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2rem .5rem;font-size:.85rem;text-align:left}
"""


def _head(title: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>")


def _steps_html(traj: Trajectory, anchor: str = "step") -> list[str]:
    e = html.escape
    parts = []
    for i, s in enumerate(traj.steps, 1):
        parts.append(f"<div class='step {e(s.action)}' id='{e(anchor)}-{i}'><b>{i}. {e(s.action)}</b> "
                     f"<code>{e(s.argument)}</code> <span class='meta'>{s.seconds:.2f} s</span>")
        if s.info.get("thought"):
            parts.append(f"<p><i>{e(s.info['thought'])}</i></p>")
        if s.info.get("notes"):
            parts.append(f"<p class='meta'>notes: {e(s.info['notes'])}</p>")
        if s.error:
            parts.append(f"<p class='bad'>{e(s.error)}</p>")
        if s.observation:
            parts.append(f"<pre>{e(s.observation.strip())}</pre>")
        parts.append("</div>")
    return parts


def render_trace(traj: Trajectory) -> str:
    e = html.escape
    parts = [_head("Research trace"),
             f"<h1>{e(traj.question)}</h1>",
             f"<p class='meta'>model {e(str(traj.meta.get('model', '')))} · template "
             f"{e(str(traj.meta.get('template', '')))} · {traj.turns} turns · {traj.tool_calls} tool calls · "
             f"{traj.generated_tokens} generated tokens · {traj.meta.get('seconds', 0):.1f} s · "
             f"stop: {e(traj.stop_reason)}</p>"]
    parts += _steps_html(traj)
    if traj.answer is not None:
        last = traj.steps[-1].info if traj.steps else {}
        parts.append(f"<h2>Answer</h2><p id='answer'>{e(traj.answer)}</p>")
        supported = last.get("supported", {})
        if supported:
            parts.append("<table><tr><th>claim</th><th>supported by citations</th></tr>")
            for claim, ok in supported.items():
                mark = "<span class='ok'>yes</span>" if ok else "<span class='bad'>no</span>"
                parts.append(f"<tr><td>{e(claim)}</td><td>{mark}</td></tr>")
            parts.append("</table>")
        parts.append("<h2>Sources</h2><ul id='sources'>")
        for cid in traj.citations:
            text = traj.retrieved.get(cid)
            flag = "" if text is not None else " <span class='bad'>(never retrieved)</span>"
            parts.append(f"<li><code>{e(cid)}</code>{flag}<br><span class='meta'>{e((text or '')[:400])}</span></li>")
        parts.append("</ul>")
    else:
        parts.append("<h2>No answer</h2>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_trace(traj: Trajectory, path: str) -> None:
    atomic_write_text(path, render_trace(traj))


# ---- report mode (B8) -------------------------------------------------------------------------------
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_MD_CITATION = re.compile(r"\[([^\[\]\s]+)\]")


def _anchor(cid: str) -> str:
    """An id attribute for a chunk id: chunk ids hold '#' and '/', which fragments mangle."""
    return "src-" + re.sub(r"[^\w-]", lambda m: f"_{ord(m.group()):x}", cid)


def _inline(text: str, known: set[str]) -> str:
    """Escaped text whose [chunk id] markers link to their source entry (unknown ids are flagged)."""
    out, pos = [], 0
    for m in _MD_CITATION.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        cid = m.group(1)
        if cid in known:
            out.append(f"<a href='#{_anchor(cid)}'>[{html.escape(cid)}]</a>")
        else:
            out.append(f"<span class='bad'>[{html.escape(cid)}]</span>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def markdown_html(markdown: str, known: set[str]) -> str:
    """The report's Markdown (headings, lists, paragraphs) as HTML; every piece of text escaped."""
    parts = []
    for block in re.split(r"\n\s*\n", markdown.strip()):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        heading = _MD_HEADING.match(lines[0]) if len(lines) == 1 else None
        if heading:
            level = min(len(heading.group(1)) + 1, 6)  # the page's own <h1> stays on top
            parts.append(f"<h{level}>{_inline(heading.group(2), known)}</h{level}>")
        elif all(ln.lstrip().startswith("- ") for ln in lines):
            items = []
            for ln in lines:
                body = ln.lstrip()[2:]
                first = _MD_CITATION.match(body)
                anchor = f" id='{_anchor(first.group(1))}'" if first else ""
                items.append(f"<li{anchor}>{_inline(body, known)}</li>")
            parts.append("<ul>" + "".join(items) + "</ul>")
        else:
            parts.append(f"<p>{_inline(' '.join(lines), known)}</p>")
    return "\n".join(parts)


def render_report_trace(report) -> str:
    """The report first, then each section's research run, so a reader can check every claim."""
    e = html.escape
    known = set(report.retrieved)
    parts = [_head("Research report"), f"<h1>Report: {e(report.topic)}</h1>",
             f"<p class='meta'>model {e(str(report.meta.get('model', '')))} · {len(report.sections)} sections · "
             f"{len(report.retrieved)} chunks read · {len(report.citations)} cited</p>"]
    score = report.meta.get("score")
    if score:
        parts.append("<table id='score'><tr><th>report reward</th><th>value</th></tr>" + "".join(
            f"<tr><td>{e(str(k))}</td><td>{float(v):.3f}</td></tr>" for k, v in score.items()) + "</table>")
    parts += ["<div id='report'>", markdown_html(report.markdown, known), "</div>", "<h2>Research</h2>"]
    for n, section in enumerate(report.sections, 1):
        parts.append(f"<h3>{n}. {e(section.question)}</h3><p class='meta'>planned by {e(section.planned_by)} · "
                     f"searched by {e(section.searched_by)} · written by {e(section.written_by)}</p>")
        if section.trajectory is not None:
            parts += _steps_html(section.trajectory, anchor=f"s{n}-step")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report_trace(report, path: str) -> None:
    atomic_write_text(path, render_report_trace(report))
