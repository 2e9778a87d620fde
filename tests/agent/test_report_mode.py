"""Report mode (B8): plan → research → write over a real small corpus, scored by the C9 report reward."""

from __future__ import annotations

import json
import re

import pytest

from research_agent.agent import AgentConfig
from research_agent.ask import main
from research_agent.report import Report, ReportConfig, ReportSection, score_report, write_report
from research_agent.trace import render_report_trace
from tests.doubles import ScriptedPolicy

CHUNK_ID = re.compile(r"\[([^\[\]\s]+#\d+)\]")


class PromptPolicy(ScriptedPolicy):
    """Answers by what the prompt asks, so the order of calls does not matter."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, name="prompt-scripted")
        self.seen: list[str] = []

    def reply(self, prompt_ids: list[int]) -> str:
        prompt = self.tokenizer.decode(prompt_ids)
        self.seen.append(prompt)
        if "research questions" in prompt:
            return "1. What is the capital of France?\n2. Who won the 1998 World Cup in football?\nSure!"
        if "Evidence:" in prompt:
            return ("France is a country in Western Europe [factbook/zz#9]. Its capital is Paris. "
                    "Dragons ruled the moon in 1200 BC. The economy")
        if "Summarize these notes" in prompt:
            return "ok"
        if "<result>" in prompt.rsplit("Question:", 1)[-1]:
            return "<answer>Paris [factbook/fr#0] [made/up#1]</answer>"
        return "<search>France capital</search>"


def test_structure_and_citations_are_assembled_by_code(smol, small_browser):
    _, tok = smol
    policy = PromptPolicy(tok)
    report = write_report("France", policy, small_browser.fork(), AgentConfig(max_turns=2), ReportConfig(sections=2))
    md = report.markdown
    # the plan's off-topic line was dropped and a fallback question filled its place
    assert [s.planned_by for s in report.sections] == ["policy", "fallback"]
    assert md.startswith("# France\n") and "## Summary" in md and md.rstrip().split("## Sources")[1]
    assert [h for h in re.findall(r"^## (.+)$", md, re.M)] == [
        "Summary", "What is the capital of France", "What is France", "Sources"]
    # invented citations and the sentence not in the evidence are gone; real ones resolve
    assert "zz#9" not in md and "made/up" not in md and "Dragons" not in md and "The economy" not in md
    cited = set(CHUNK_ID.findall(md))
    assert cited and cited <= set(report.retrieved)
    sources = md.split("## Sources")[1]
    assert set(CHUNK_ID.findall(sources)) == cited  # every citation has a Sources entry and vice versa
    assert all(s.written_by == "policy" for s in report.sections)  # "Its capital is Paris." is grounded
    score = score_report(report, relevance="lexical")
    assert score["hard_ok"] == 1.0 and score["citations"] == 1.0 and 0 < score["score"] <= 1


def test_report_trace_escapes_text_and_links_citations():
    md = ("# T <script>alert(1)</script>\n\n## Summary\n\nSee [doc/a#0] and [fake/x#1].\n\n"
          "## Sources\n\n- [doc/a#0] <img src=x onerror=alert(1)>")
    report = Report(topic="T <script>", title="T", markdown=md, retrieved={"doc/a#0": "text"},
                    sections=[ReportSection("H", "q?")], meta={"score": {"score": 0.5}})
    page = render_report_trace(report)
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "<a href='#src-doc_2fa_230'>[doc/a#0]</a>" in page and "id='src-doc_2fa_230'" in page
    assert "<span class='bad'>[fake/x#1]</span>" in page  # a citation to nothing read is flagged


@pytest.mark.model
def test_ask_report_end_to_end_with_smollm(small_corpus_dir, tmp_path, capsys):
    out, trace = tmp_path / "report.md", tmp_path / "trace.html"
    rc = main(["Germany", "--report", "--sections", "2", "--model", "smollm2-135m", "--corpus", str(small_corpus_dir),
               "--max-turns", "1", "--max-new-tokens", "16", "--write-tokens", "40", "--out", str(out),
               "--trace", str(trace), "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    md = data["markdown"]
    assert out.read_text(encoding="utf-8") == md
    score = data["meta"]["score"]
    assert score["hard_nonempty"] == score["hard_headings"] == score["hard_sections"] == score["hard_ok"] == 1.0
    assert 0 < score["score"] <= 1
    cited = set(CHUNK_ID.findall(md))
    assert cited and cited <= set(data["retrieved"])  # every citation resolves to a chunk the run read
    assert len(data["sections"]) == 2 and all(s["trajectory"]["steps"] for s in data["sections"])
    page = trace.read_text(encoding="utf-8")
    assert "id='report'" in page and "id='score'" in page and page.count("class='step") >= 2
