"""Case memory (B6, Memento): past research runs retrieved as guidance for a new question.

Memento improves an agent without training by showing it how similar questions were solved
before.  A case is the compact record of one finished trajectory (question, the tool calls made,
the answer, whether it was right).  The store is a corpus directory built with the ``corpus``
package, one document per case whose text is the question, so a new question finds its
neighbours through the same FAISS + BM25 hybrid search the agent uses; adding cases goes through
``add_documents`` (only new cases are embedded, the directory is replaced atomically).

Leakage rule: a question's own gold must never reach its own prompt.  Fill the memory from the
training split only when evaluating; as a second guard, ``retrieve`` never returns a case whose
question is the query itself (after answer normalization).

    python -m research_agent.memory add runs/x/trajectories.jsonl --out memory/
    python -m research_agent.memory show memory/ "What is the capital of France?"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from corpus import CorpusError, Document, LocalBrowser, add_documents, build_corpus
from corpus.embed import Embedder
from corpus.store import MANIFEST, build_lock
from rewards.qa import exact_match, gold_answers, token_f1
from rewards.text import normalize_answer

from . import prompts
from .trajectory import TOOL_ACTIONS, Trajectory

DEFAULT_MIN_F1 = 0.8
CASE_PREFIX = "case/"
MAX_STEPS = 4
MAX_CANDIDATES = 20
# all-MiniLM-L6-v2 cosine: paraphrases ≈ 0.9, same question pattern on another entity ≈ 0.6,
# unrelated questions over the same corpus ≤ 0.4.
DEFAULT_MIN_SIMILARITY = 0.45


@dataclass
class Case:
    """One past run, as much of it as helps a later run: what was asked, done and found."""

    question: str
    steps: list[str] = field(default_factory=list)  # "search: capital of France", ...
    answer: str = ""
    success: bool = False
    outcome: str = ""  # correct | wrong | supported | unsupported | no answer
    reward: float | None = None  # token F1 against gold when known
    source: str = ""  # where the case came from (a run id, a file)

    @property
    def id(self) -> str:
        """Stable over re-adds of the same run, so adding a file twice adds nothing."""
        key = json.dumps([self.question, self.steps, self.answer, self.outcome], ensure_ascii=False)
        return CASE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:20]

    def to_document(self) -> Document:
        return Document(id=self.id, title="", text=self.question, meta={"case": asdict(self)})

    @classmethod
    def from_document(cls, doc: Document) -> Case:
        data = doc.meta.get("case") or {}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def step_summary(traj: Trajectory) -> list[str]:
    """The valid tool calls of a run as ``action: argument``, the plan a later run can copy."""
    calls = [s for s in traj.steps if s.action in TOOL_ACTIONS and s.valid and not s.error]
    return [f"{s.action}: {' '.join(s.argument.split())}" for s in calls[:MAX_STEPS]]


def judge_outcome(traj: Trajectory, min_f1: float = DEFAULT_MIN_F1) -> tuple[bool, str, float | None]:
    """(success, outcome, reward): gold EM/F1 when the run carries gold, else its citation check.

    Without gold (an ``ask`` run) the only evidence of success is that every citation was
    retrieved and supports the answer; such cases are labelled "supported", not "correct".
    """
    answer = (traj.answer or "").strip()
    if not answer:
        return False, "no answer", 0.0 if gold_answers(traj) else None
    golds = gold_answers(traj)
    if golds:
        f1 = token_f1(answer, golds)
        ok = exact_match(answer, golds) == 1.0 or f1 >= min_f1
        return ok, "correct" if ok else "wrong", f1
    info = traj.steps[-1].info if traj.steps else {}
    ok = bool(traj.citations) and not info.get("unretrieved") and info.get("support_rate", 0.0) >= 1.0
    return ok, "supported" if ok else "unsupported", None


def case_from_trajectory(traj: Trajectory, min_f1: float = DEFAULT_MIN_F1, source: str = "") -> Case:
    success, outcome, reward = judge_outcome(traj, min_f1)
    return Case(question=" ".join(traj.question.split()), steps=step_summary(traj),
                answer=" ".join((traj.answer or "").split()), success=success, outcome=outcome,
                reward=reward, source=source or traj.id)


def _clip(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def render_case(case: Case, *, warning: bool = False, field_chars: int = 160) -> str:
    """One case in a few lines; every field clipped, so one long case cannot eat the budget."""
    steps = " → ".join(_clip(s, field_chars // 2) for s in case.steps[:MAX_STEPS]) or "(none)"
    template = prompts.MEMORY_WARNING if warning else prompts.MEMORY_CASE
    return template.format(question=_clip(case.question, field_chars), steps=steps,
                           answer=_clip(case.answer, field_chars // 2) or "(none)")


def render_guidance(cases: list[Case], warnings: list[Case] = (), max_chars: int = 1200) -> str:
    """Guidance text for the prompt, at most ``max_chars`` (≈ 300 tokens: small models' prompts
    are short); a case that does not fit whole is left out rather than cut mid-way."""
    blocks = [render_case(c) for c in cases] + [render_case(c, warning=True) for c in warnings]
    text = ""
    for block in blocks:
        candidate = f"{text}\n{block}" if text else f"{prompts.MEMORY_HEADER}\n{block}"
        if len(candidate) <= max_chars:
            text = candidate
    return text


class CaseMemory:
    """A directory of cases: ``add`` grows it, ``retrieve`` / ``guidance`` read it."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        if self.path.exists() and any(self.path.iterdir()) and not (self.path / MANIFEST).exists():
            raise CorpusError(f"{self.path} is not a case memory (no {MANIFEST}); give a new or empty directory")
        self._browser: LocalBrowser | None = None
        _ = self.browser  # load now, not lazily from several agent threads at once

    @property
    def browser(self) -> LocalBrowser | None:
        if self._browser is None and (self.path / MANIFEST).exists():
            self._browser = LocalBrowser(self.path, retriever="hybrid")
        return self._browser

    def __len__(self) -> int:
        return len(self.browser) if self.browser is not None else 0

    def cases(self) -> list[Case]:
        return [Case.from_document(d) for d in self.browser.documents()] if self.browser else []

    def add(self, cases: Iterable[Case]) -> int:
        """Add cases not stored yet; return how many were new.  Safe against concurrent adders."""
        fresh = {c.id: c for c in cases if c.question}
        with build_lock(self.path):
            self._browser = None  # another process may have added since we loaded
            stored = {d.id for d in self.browser.documents()} if self.browser else set()
            docs = [c.to_document() for cid, c in fresh.items() if cid not in stored]
            if not docs:
                return 0
            if not stored:
                build_corpus(out=self.path, documents=docs, progress=False)
            else:
                add_documents(self.path, docs, progress=False)
            self._browser = None
            return len(docs)

    def add_trajectories(self, trajs: Iterable[Trajectory], min_f1: float = DEFAULT_MIN_F1,
                         source: str = "") -> int:
        return self.add(case_from_trajectory(t, min_f1, source) for t in trajs
                        if t.stop_reason != "error" and t.question.strip())

    def retrieve(self, question: str, k: int = 2, warnings: int = 1,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY) -> tuple[list[Case], list[Case]]:
        """The ``k`` nearest successful cases and up to ``warnings`` nearest failed ones.

        Candidates come from the hybrid search; a case below ``min_similarity`` (cosine of the two
        questions) is dropped, since an unrelated case misleads a small model more than none.
        Cases asking the query itself are skipped (no gold of a question in its own prompt), and
        one case per distinct question is kept, so the hints are not the same run twice.
        """
        if self.browser is None or not question.strip():
            return [], []
        candidates = self._candidates(question)
        sims = self._similarities(question, [c.question for c in candidates])
        good: list[Case] = []
        bad: list[Case] = []
        for case, sim in zip(candidates, sims, strict=True):
            if sim < min_similarity:
                continue
            if case.success and len(good) < k:
                good.append(case)
            elif not case.success and case.outcome != "no answer" and len(bad) < warnings:
                bad.append(case)
        return good, bad

    def _candidates(self, question: str) -> list[Case]:
        seen = {normalize_answer(question)}
        out: list[Case] = []
        for hit in self.browser.search(question, k=MAX_CANDIDATES):
            case = Case.from_document(self.browser.document(hit.doc_id))
            key = normalize_answer(case.question)
            if key not in seen:
                seen.add(key)
                out.append(case)
        return out

    def _similarities(self, question: str, others: list[str]) -> list[float]:
        if not others:
            return []
        vecs = Embedder(self.browser.manifest["embedder"]["name"]).encode([question, *others])
        return [float(x) for x in vecs[1:] @ vecs[0]]

    def guidance(self, question: str, k: int = 2, warnings: int = 1, max_chars: int = 1200,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY) -> str:
        good, bad = self.retrieve(question, k=k, warnings=warnings, min_similarity=min_similarity)
        return render_guidance(good, bad, max_chars=max_chars) if good or bad else ""


# ---- reading runs ---------------------------------------------------------------------------------
def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Trajectories from a JSONL file, or from every ``*.jsonl`` in a run / shard directory.

    A torn or foreign line is skipped: a memory is filled from whatever finished runs hold.
    """
    path = Path(path).expanduser()
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    out: list[Trajectory] = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                out.append(Trajectory.from_json(line))
            except (ValueError, KeyError, TypeError):
                continue
    return out


# ---- CLI ------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research_agent.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add finished trajectories (JSONL files or run directories) as cases")
    add.add_argument("inputs", nargs="+", help="trajectories.jsonl files or directories of JSONL shards")
    add.add_argument("--out", required=True, help="memory directory (created on first add)")
    add.add_argument("--min-f1", type=float, default=DEFAULT_MIN_F1,
                     help="token F1 against gold at or above which a run counts as a success (EM always does)")
    show = sub.add_parser("show", help="print the guidance a question would get")
    show.add_argument("memory", help="memory directory")
    show.add_argument("question")
    show.add_argument("--k", type=int, default=2, help="successful cases shown")
    show.add_argument("--warnings", type=int, default=1, help="failed cases shown as warnings")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        memory = CaseMemory(args.memory if args.command == "show" else args.out)
        if args.command == "show":
            print(memory.guidance(args.question, k=args.k, warnings=args.warnings) or "(no similar cases)")
            return 0
        trajs = [t for src in args.inputs for t in read_trajectories(src)]
        new = memory.add_trajectories(trajs, min_f1=args.min_f1)
        wins = sum(c.success for c in memory.cases())
    except (CorpusError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"read": len(trajs), "new_cases": new, "cases": len(memory), "successful": wins}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
