"""Report mode (B8): a structured Markdown report from a longer research run.

plan → research → write.  The policy proposes section questions, the ordinary research agent
answers each one with the same browser (so every chunk it reads is recorded), and the policy writes
each section's prose from that section's evidence.  Everything a reader or the report reward
(C9) checks mechanically — the headings, the inline ``[chunk id]`` citations, the Sources list — is
assembled by code, and a citation the model invents is dropped, so even a 135M model yields a
report in the right shape whose every citation resolves to a chunk the run retrieved.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from corpus.browser import Browser, BrowserError

from . import prompts
from .agent import AgentConfig, ResearchAgent
from .trajectory import Step, Trajectory

_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.):]|Q\d*[.:])\s*", re.IGNORECASE)
_MARKER = re.compile(r"\[([^\[\]]*)\]")
_TAG = re.compile(r"</?[a-zA-Z_]+>")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[\w']+")
_STOP = {"the", "a", "an", "of", "in", "on", "and", "or", "is", "are", "was", "to", "what", "which", "who",
         "how", "does", "do", "its", "it", "for", "with", "about", "by", "from", "that", "this", "be"}

# Section questions used when the policy proposes too few usable ones: generic, but searchable.
FALLBACK_QUESTIONS = (
    "What is {topic}?",
    "What are the main facts about {topic}?",
    "What is the history of {topic}?",
    "What is {topic} connected to?",
)


@dataclass
class ReportConfig:
    sections: int = field(default=3, metadata={"help": "section questions to research (2-4)"})
    evidence_per_section: int = field(default=3, metadata={"help": "chunks shown to the writer per section"})
    evidence_chars: int = field(default=400, metadata={"help": "characters of each evidence chunk in the prompt"})
    plan_tokens: int = field(default=80, metadata={"help": "tokens for the policy's section questions"})
    write_tokens: int = field(default=120, metadata={"help": "tokens for each section's prose"})
    section_words: int = field(default=120, metadata={"help": "target words per section (the length reward)"})

    def __post_init__(self):
        if not 2 <= self.sections <= 4:
            raise ValueError("a report has 2 to 4 sections")


@dataclass
class ReportSection:
    heading: str
    question: str
    planned_by: str = "policy"  # policy | fallback
    text: str = ""  # the section's Markdown body, citations inline
    citations: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # chunk ids shown to the writer
    written_by: str = "policy"  # policy | extract (the model's prose was unusable)
    searched_by: str = "agent"  # agent | report (the agent read nothing; the question was searched)
    trajectory: Trajectory | None = None


@dataclass
class Report:
    topic: str
    title: str
    summary: str = ""
    sections: list[ReportSection] = field(default_factory=list)
    retrieved: dict[str, str] = field(default_factory=dict)  # every chunk the run read
    markdown: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def citations(self) -> list[str]:
        """Cited chunk ids in order of first citation: the Sources list."""
        return [c for c in dict.fromkeys(m.strip() for m in _MARKER.findall(self.markdown)) if c in self.retrieved]

    def as_trajectory(self) -> Trajectory:
        """The record the report reward (C9) scores: the Markdown is the answer."""
        return Trajectory(question=self.topic, answer=self.markdown, citations=self.citations,
                          retrieved=dict(self.retrieved), stop_reason="answer", meta={"mode": "report", **self.meta})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for s, sec in zip(d["sections"], self.sections, strict=True):
            s["trajectory"] = sec.trajectory.to_dict() if sec.trajectory else None
        return d


# ---- text helpers ---------------------------------------------------------------------------------
def _words(text: str) -> set[str]:
    return {w for w in (t.lower() for t in _WORD.findall(text)) if w not in _STOP}


def _oneline(text: str) -> str:
    return " ".join(text.split())


def clean_prose(text: str, allowed: set[str]) -> tuple[str, list[str]]:
    """The model's prose without tags or invented citations; return it and the kept citations."""
    text = _TAG.sub(" ", text).split("\n\n")[0]
    kept: list[str] = []

    def keep(m: re.Match) -> str:
        cid = m.group(1).strip()
        if cid in allowed:
            kept.append(cid)
            return f"[{cid}]"
        return ""

    text = _oneline(_MARKER.sub(keep, text))
    text = re.sub(r"\s+([.,;:])", r"\1", text).strip()
    return text, list(dict.fromkeys(kept))


def grounded(text: str, evidence_text: str, min_overlap: float = 0.5) -> str:
    """The sentences of ``text`` mostly made of the evidence's words, each once, none cut off.

    A small model pads its prose with confident inventions; a sentence whose content words are
    mostly absent from the evidence is one, and is dropped rather than shown with a citation.
    """
    known = _words(evidence_text)
    parts = _SENTENCE.split(text.strip())
    if len(parts) > 1 and not re.search(r"[.!?](\s*\[[^\]]*\])*$", parts[-1]):
        parts = parts[:-1]  # generation stopped mid-sentence
    kept: list[str] = []
    for sentence in parts:
        words = _words(_MARKER.sub("", sentence))
        if len(words) >= 2 and len(words & known) / len(words) >= min_overlap and sentence not in kept:
            kept.append(sentence)
    return " ".join(kept)


def _extract(text: str, sentences: int = 2, chars: int = 300) -> str:
    """The first sentences of an evidence chunk: the prose when the model's is unusable."""
    parts = _SENTENCE.split(_oneline(text))
    out = " ".join(parts[:sentences])
    return out if len(out) <= chars else out[: chars - 1].rstrip() + "…"


def _heading(question: str) -> str:
    h = _oneline(question).rstrip("?.! ")
    h = h[:1].upper() + h[1:]
    return h if len(h) <= 80 else h[:79].rstrip() + "…"


# ---- plan ------------------------------------------------------------------------------------------
def parse_plan(text: str, topic: str, n: int) -> list[str]:
    """Usable questions from the policy's plan: one per line, on topic, not too short or long."""
    topic_words = _words(topic)
    out: list[str] = []
    for line in text.splitlines():
        q = _oneline(_TAG.sub(" ", _BULLET.sub("", line))).strip("\"' ")
        if not 3 <= len(q.split()) <= 25 or not (_words(q) & topic_words):
            continue
        if q.lower() not in {x.lower() for x in out}:
            out.append(q)
    return out[:n]


def plan_sections(policy, topic: str, cfg: ReportConfig) -> list[ReportSection]:
    text = complete(policy, prompts.REPORT_PLAN.format(topic=topic, n=cfg.sections), cfg.plan_tokens)
    sections = [ReportSection(_heading(q), q) for q in parse_plan(text, topic, cfg.sections)]
    for template in FALLBACK_QUESTIONS:
        if len(sections) >= cfg.sections:
            break
        q = template.format(topic=topic)
        if q.lower() not in {s.question.lower() for s in sections}:
            sections.append(ReportSection(_heading(q), q, planned_by="fallback"))
    return sections


def complete(policy, user: str, max_new_tokens: int) -> str:
    """One greedy chat turn of the policy (no system prompt: these are not research actions)."""
    tok = policy.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return policy.generate([list(ids)], max_new_tokens=max_new_tokens, temperature=0.0)[0].text


# ---- research --------------------------------------------------------------------------------------
def research_section(section: ReportSection, policy, browser: Browser, config: AgentConfig,
                     cfg: ReportConfig, on_step: Callable[[Trajectory, Step], None] | None = None) -> dict[str, str]:
    """Run the agent on the section question; return the chunks read and pick the writer's evidence.

    The agent's cited chunks come first.  When the agent read nothing (a small model that never
    searched), the section question itself is searched, so the section still rests on evidence;
    ``section.searched_by`` records which happened.
    """
    traj = ResearchAgent(policy, browser, config, on_step=on_step).run(section.question)
    section.trajectory = traj
    found = dict(traj.retrieved)
    if not found:
        section.searched_by = "report"
        try:
            for hit in browser.search(section.question, k=cfg.evidence_per_section):
                found.setdefault(hit.chunk_id, _chunk_text(browser, hit.chunk_id, hit.snippet))
        except BrowserError as e:
            section.searched_by = f"report (failed: {e})"
    ranked = [c for c in traj.citations if c in found] + list(found)
    section.evidence = list(dict.fromkeys(ranked))[: cfg.evidence_per_section]
    return found


def _chunk_text(browser: Browser, cid: str, fallback: str) -> str:
    try:
        return browser.chunk_text(cid)
    except (BrowserError, AttributeError, KeyError):
        return fallback


# ---- write -----------------------------------------------------------------------------------------
def write_section(section: ReportSection, policy, retrieved: dict[str, str], cfg: ReportConfig) -> None:
    evidence = {c: _oneline(retrieved[c])[: cfg.evidence_chars] for c in section.evidence}
    if not evidence:
        section.text, section.written_by = "No evidence was found for this question.", "extract"
        return
    lines = "\n".join(f"[{c}] {t}" for c, t in evidence.items())
    raw = complete(policy, prompts.REPORT_SECTION.format(evidence=lines, question=section.question),
                   cfg.write_tokens)
    prose, cited = clean_prose(raw, set(evidence))
    prose = grounded(prose, " ".join(evidence.values()))
    cited = [c for c in cited if f"[{c}]" in prose]
    if not prose:
        first = next(iter(evidence))
        prose, cited, section.written_by = _extract(retrieved[first]), [], "extract"
    if not cited:
        cited = list(evidence)[:2]
        prose = f"{prose.rstrip()} " + " ".join(f"[{c}]" for c in cited)
    paragraphs = [prose]
    answer = _finding(section.trajectory)
    if answer:
        paragraphs.append(answer)
    section.text = "\n\n".join(paragraphs)
    section.citations = list(dict.fromkeys(cited + _cited_ids(answer, retrieved)))


def _finding(traj: Trajectory | None) -> str:
    """The agent's short answer, kept when it cites something it actually read."""
    if traj is None or not traj.answered:
        return ""
    cites = [c for c in traj.citations if c in traj.retrieved]
    if not cites:
        return ""
    answer = _oneline(_MARKER.sub("", traj.answer)).strip()
    return f"Short answer: {answer} " + " ".join(f"[{c}]" for c in cites[:2]) if answer else ""


def _cited_ids(text: str, retrieved: dict[str, str]) -> list[str]:
    return [m.strip() for m in _MARKER.findall(text) if m.strip() in retrieved]


def write_summary(report: Report, policy, cfg: ReportConfig) -> str:
    notes = "\n".join(f"- {_oneline(_MARKER.sub('', s.text))[:300]}" for s in report.sections)
    raw = complete(policy, prompts.REPORT_SUMMARY.format(notes=notes, topic=report.topic), cfg.write_tokens)
    prose = grounded(clean_prose(raw, set())[0], notes)
    if not prose:
        prose = " ".join(_extract(_MARKER.sub("", s.text), sentences=1, chars=200) for s in report.sections)
    cites = [s.citations[0] for s in report.sections if s.citations]
    return f"{prose} " + " ".join(f"[{c}]" for c in dict.fromkeys(cites))


def render_markdown(report: Report) -> str:
    """The report's Markdown: title, Summary, one heading per section, Sources."""
    parts = [f"# {report.title}", "## Summary", report.summary.strip()]
    for s in report.sections:
        parts += [f"## {s.heading}", s.text.strip()]
    parts.append("## Sources")
    cited = list(dict.fromkeys(c for s in report.sections for c in s.citations))
    parts.append("\n".join(f"- [{c}] {_oneline(report.retrieved[c])[:160]}" for c in cited))
    return "\n\n".join(p for p in parts if p) + "\n"


def write_report(topic: str, policy, browser: Browser, config: AgentConfig | None = None,
                 cfg: ReportConfig | None = None,
                 on_step: Callable[[Trajectory, Step], None] | None = None) -> Report:
    """Plan, research and write a report on ``topic``."""
    topic = _oneline(topic or "")
    if not topic:
        raise ValueError("the report topic is empty")
    config, cfg = config or AgentConfig(), cfg or ReportConfig()
    report = Report(topic=topic, title=topic[:1].upper() + topic[1:],
                    meta={"model": getattr(policy, "name", ""), "report_config": asdict(cfg)})
    report.sections = plan_sections(policy, topic, cfg)
    for section in report.sections:
        report.retrieved.update(research_section(section, policy, browser, config, cfg, on_step))
    for section in report.sections:
        write_section(section, policy, report.retrieved, cfg)
    report.summary = write_summary(report, policy, cfg)
    report.markdown = render_markdown(report)
    return report


def score_report(report: Report, cfg: ReportConfig | None = None, relevance: str = "embedding") -> dict[str, Any]:
    """The C9 report reward: hard format levels (Summary and Sources present, ≥ 3 headings), then
    the soft mix; the length target scales with the number of sections."""
    from rewards.report import ReportReward

    cfg = cfg or ReportConfig()
    reward = ReportReward(required_sections=("summary", "sources"), min_headings=3,
                          min_paragraphs=len(report.sections) + 1,
                          target_words=cfg.section_words * max(1, len(report.sections)), relevance=relevance)
    result = reward(report.as_trajectory())
    return {"score": result.score, **result.components}
