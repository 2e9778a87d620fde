"""A self-contained HTML page of one research run: steps, documents, citations, timings.

For people who would rather look than read a JSON trajectory.  No scripts, no external assets:
the page opens anywhere, including a headless browser in a test.
"""

from __future__ import annotations

import html

from corpus.packages import atomic_write_text

from .trajectory import Trajectory

_CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}.step{border-left:4px solid #888;margin:1rem 0;padding:.3rem .8rem;background:#fafafa}
.search{border-color:#2a7ae2}.open{border-color:#2ca02c}.find{border-color:#ff7f0e}.answer{border-color:#9467bd}
.invalid{border-color:#d62728}pre{white-space:pre-wrap;font-size:.85rem;background:#f0f0f0;padding:.5rem}
.meta{color:#666;font-size:.85rem}.ok{color:#2ca02c}.bad{color:#d62728}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2rem .5rem;font-size:.85rem;text-align:left}
"""


def render_trace(traj: Trajectory) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Research trace</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>{e(traj.question)}</h1>",
             f"<p class='meta'>model {e(str(traj.meta.get('model', '')))} · template "
             f"{e(str(traj.meta.get('template', '')))} · {traj.turns} turns · {traj.tool_calls} tool calls · "
             f"{traj.generated_tokens} generated tokens · {traj.meta.get('seconds', 0):.1f} s · "
             f"stop: {e(traj.stop_reason)}</p>"]
    for i, s in enumerate(traj.steps, 1):
        parts.append(f"<div class='step {e(s.action)}' id='step-{i}'><b>{i}. {e(s.action)}</b> "
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
