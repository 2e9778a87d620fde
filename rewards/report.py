"""C9: long-form report reward (RL-Struct hierarchy with a LongWriter-style soft mix).

Hard levels (RL-Struct): the report exists, has at least `min_headings` markdown headings and every
required section.  Violating a hard level gives 0 — no amount of quality makes up for a report in
the wrong shape.  Soft levels are continuous in [0, 1] and averaged:
  structure — paragraphs against `min_paragraphs`;
  length    — 1 within ±`length_tolerance` of `target_words`, falling linearly to 0 at twice that;
  citations — share of body paragraphs with an inline [id] marker for a retrieved or cited chunk;
  relevance — question/report embedding similarity (or question content-word recall, "lexical").
"""

from __future__ import annotations

import re
from typing import Any

from .base import RewardResult, clamp
from .text import content_words, word_count

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_MARKER = re.compile(r"\[([^\[\]]+)\]")


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip() and not _HEADING.fullmatch(p.strip())]


class ReportReward:
    def __init__(
        self,
        required_sections: tuple[str, ...] = (),
        target_words: int = 800,
        length_tolerance: float = 0.2,
        min_headings: int = 3,
        min_paragraphs: int = 3,
        relevance: str = "embedding",
    ):
        if relevance not in ("embedding", "lexical"):
            raise ValueError("relevance must be 'embedding' or 'lexical'")
        if target_words < 1 or not 0 <= length_tolerance < 1:
            raise ValueError("target_words must be >= 1 and length_tolerance in [0, 1)")
        self.required_sections = tuple(s.lower() for s in required_sections)
        self.target_words = target_words
        self.length_tolerance = length_tolerance
        self.min_headings = min_headings
        self.min_paragraphs = max(1, min_paragraphs)
        self.relevance = relevance

    def hard_checks(self, report: str) -> dict[str, float]:
        headings = [h.lower() for h in _HEADING.findall(report)]
        missing = [s for s in self.required_sections if not any(s in h for h in headings)]
        return {
            "nonempty": float(bool(report.strip())),
            "headings": float(len(headings) >= self.min_headings),
            "sections": float(not missing),
        }

    def _length(self, words: int) -> float:
        dev = abs(words - self.target_words) / self.target_words
        tol = self.length_tolerance
        return 1.0 if dev <= tol else clamp(1 - (dev - tol) / max(tol, 1e-9) if tol else 1 - dev)

    def _relevance(self, question: str, report: str) -> float:
        if self.relevance == "embedding":
            try:
                from .judge import max_similarity

                return clamp(max_similarity(question, [report[:4000]]))
            except Exception:
                pass  # fall back to lexical rather than fail a rollout
        q = content_words(question)
        return len(q & content_words(report)) / len(q) if q else 0.0

    def __call__(self, traj: Any) -> RewardResult:
        report = getattr(traj, "answer", None) or ""
        hard = self.hard_checks(report)
        if not all(hard.values()):
            return RewardResult(0.0, {**{f"hard_{k}": v for k, v in hard.items()}, "hard_ok": 0.0})
        paras = _paragraphs(report)
        ids = set(getattr(traj, "citations", None) or []) | set(getattr(traj, "retrieved", None) or {})
        cited = sum(any(m.strip() in ids for m in _MARKER.findall(p)) for p in paras)
        soft = {
            "structure": min(1.0, len(paras) / self.min_paragraphs),
            "length": self._length(word_count(report)),
            "citations": cited / len(paras) if paras else 0.0,
            "relevance": self._relevance(getattr(traj, "question", "") or "", report),
        }
        return RewardResult(
            sum(soft.values()) / len(soft),
            {**{f"hard_{k}": v for k, v in hard.items()}, "hard_ok": 1.0, **soft},
        )
