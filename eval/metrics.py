"""G1: QA metrics over finished trajectories, including the evidence funnel.

Accuracy alone cannot say *why* an agent fails.  The evidence funnel follows the gold passage
through the episode — retrieved by some search → opened → located with find → cited → answer
correct — so a drop between two stages points at the skill to train (querying, reading, citing).
It is computed only for items whose gold passage is known (SQuAD-open, synthesized sets).

Abstention is scored the way SimpleQA grades: each item is correct, incorrect, or not attempted.
On a probe set whose answers are mostly not in the corpus, an honest agent says "not found"
(not attempted) instead of guessing (incorrect), and ``incorrect_rate`` is the hallucination rate.

Every value returned is a plain float so that results JSON, tables and plots need no special cases;
a metric that is undefined for a set (no gold passages, no citations) is left out rather than
reported as a misleading 0.
"""

from __future__ import annotations

import re
from statistics import mean

from research_agent.trajectory import Trajectory
from rewards.qa import exact_match, normalize_answer, token_f1

FUNNEL_STAGES = ("retrieved", "opened", "found", "cited", "correct")

# Phrases that mean "I could not find it".  Matched on the normalized answer, as whole words.
ABSTENTION_PHRASES = (
    "not found",
    "no answer",
    "unknown",
    "i dont know",
    "i do not know",
    "cannot be determined",
    "can not be determined",
    "cannot find",
    "could not find",
    "couldnt find",
    "unable to find",
    "unable to determine",
    "not enough information",
    "insufficient information",
    "no information",
    "unanswerable",
    "not mentioned",
    "not available",
)
_ABSTAIN = re.compile(r"\b(" + "|".join(re.escape(p) for p in ABSTENTION_PHRASES) + r")\b")
_BOOL = re.compile(r"\b(yes|no|true|false)\b")


def is_abstention(answer: str | None) -> bool:
    """True when the agent gave no answer or said in words that it could not find one."""
    norm = normalize_answer(answer)
    return not norm or bool(_ABSTAIN.search(norm))


def gold_answers(traj: Trajectory) -> list[str]:
    answers = (traj.gold or {}).get("answers", [])
    if isinstance(answers, str):
        answers = [answers]
    return [str(a) for a in answers if a is not None and str(a).strip()]


def is_answerable(traj: Trajectory) -> bool:
    """Items marked ``answerable: false`` (or without gold answers) test abstention, not accuracy."""
    return bool((traj.gold or {}).get("answerable", True)) and bool(gold_answers(traj))


def scored_answer(traj: Trajectory) -> str:
    """The answer as it is scored: yes/no questions keep only the leading yes/no word.

    A StrategyQA answer "Yes, because the Nile is longer" is correct; EM on the whole sentence
    would call it wrong and measure verbosity instead of knowledge.
    """
    answer = traj.answer or ""
    if (traj.gold or {}).get("answer_type") == "boolean":
        m = _BOOL.search(normalize_answer(answer))
        if not m:
            return answer
        return {"true": "yes", "false": "no"}.get(m.group(1), m.group(1))
    return answer


def doc_of(chunk_id: str) -> str:
    """Chunk ids are ``doc_id#n`` (A2); the part before the last '#' is the document."""
    return chunk_id.rpartition("#")[0] or chunk_id


def _gold_evidence(traj: Trajectory) -> tuple[set[str], set[str]]:
    gold = traj.gold or {}
    return set(gold.get("supporting") or []), set(gold.get("supporting_docs") or [])


def _is_gold(chunk_id: str, chunks: set[str], docs: set[str]) -> bool:
    return bool(chunk_id) and (chunk_id in chunks or doc_of(chunk_id) in docs)


def _contains_answer(text: str, answers: list[str]) -> bool:
    hay = f" {normalize_answer(text)} "
    return any(f" {a} " in hay for a in (normalize_answer(x) for x in answers) if a)


def funnel_stages(traj: Trajectory, cumulative: bool = True) -> dict[str, bool] | None:
    """Which funnel stages this trajectory reached, or None without a known gold passage.

    A stage counts only if every earlier stage was reached too: an answer that is correct without
    the gold passage was cited is luck or prior knowledge, not research.  ``cumulative=False`` gives
    each stage on its own (an agent that answers straight from search snippets never "opens").
    """
    chunks, docs = _gold_evidence(traj)
    if not chunks and not docs:
        return None
    reached = dict.fromkeys(FUNNEL_STAGES, False)
    for step in traj.steps:
        info = step.info or {}
        if step.action == "search":
            hit = any(_is_gold(c, chunks, docs) for c in info.get("hits", []))
            reached["retrieved"] |= hit or any(d in docs for d in info.get("doc_ids", []))
        elif step.action == "open":
            shown = info.get("chunk_ids", [])
            reached["opened"] |= info.get("doc_id") in docs or any(_is_gold(c, chunks, docs) for c in shown)
        elif step.action == "find":
            matches = info.get("matches", [])
            in_gold_doc = info.get("doc_id") in docs and bool(matches)
            reached["found"] |= in_gold_doc or any(_is_gold(c, chunks, docs) for c in matches)
    reached["cited"] = any(_is_gold(c, chunks, docs) for c in traj.citations)
    reached["correct"] = exact_match(scored_answer(traj), gold_answers(traj)) == 1.0
    if not cumulative:
        return reached
    out, ok = {}, True
    for stage in FUNNEL_STAGES:
        ok = ok and reached[stage]
        out[stage] = ok
    return out


def citation_precision(traj: Trajectory) -> float | None:
    """Share of cited chunks that are gold evidence or contain a gold answer; None without citations."""
    if not traj.citations:
        return None
    chunks, docs = _gold_evidence(traj)
    answers = gold_answers(traj)
    good = sum(
        1
        for c in traj.citations
        if _is_gold(c, chunks, docs) or _contains_answer(traj.retrieved.get(c, ""), answers)
    )
    return good / len(traj.citations)


def citation_recall(traj: Trajectory) -> float | None:
    """Share of the gold evidence that was cited (chunk level if known, else document level)."""
    chunks, docs = _gold_evidence(traj)
    cited = set(traj.citations)
    if chunks:
        return len(cited & chunks) / len(chunks)
    if docs:
        return len({doc_of(c) for c in cited} & docs) / len(docs)
    return None


def _answer_claims(traj: Trajectory) -> dict[str, bool]:
    """The answer step's claim → supported map (B5's citation check), empty if there is none."""
    for step in reversed(traj.steps):
        if step.action == "answer":
            supported = (step.info or {}).get("supported")
            return supported if isinstance(supported, dict) else {}
    return {}


def score_trajectory(traj: Trajectory) -> dict[str, float]:
    """Per-question scores (the rows behind ``qa_metrics``), handy for error analysis."""
    answers = gold_answers(traj)
    pred = scored_answer(traj)
    abstained = is_abstention(traj.answer)
    em = exact_match(pred, answers) if answers and not abstained else 0.0
    f1 = token_f1(pred, answers) if answers and not abstained else 0.0
    tokens = traj.generated_tokens or sum(len(s.completion_ids) for s in traj.steps)
    row = {
        "em": em,
        "f1": f1,
        "answered": float(not abstained),
        "abstained": float(abstained),
        "incorrect": float(not abstained and em == 0.0),
        "turns": float(traj.turns),
        "searches": float(traj.count("search")),
        "opens": float(traj.count("open")),
        "finds": float(traj.count("find")),
        "invalid_turns": float(traj.count("invalid")),
        "tool_calls": float(traj.tool_calls),
        "generated_tokens": float(tokens),
        "seconds": float((traj.meta or {}).get("seconds", 0.0) or 0.0),
        "answerable": float(is_answerable(traj)),
    }
    claims = _answer_claims(traj)
    if claims:
        row["citations_per_claim"] = len(traj.citations) / len(claims)
        row["support_rate"] = sum(bool(v) for v in claims.values()) / len(claims)
    if not abstained:
        row["answer_words"] = float(len((traj.answer or "").split()))
    for name, fn in (("citation_precision", citation_precision), ("citation_recall", citation_recall)):
        value = fn(traj)
        if value is not None:
            row[name] = value
    stages = funnel_stages(traj)
    if stages is not None:
        row.update({f"funnel_{s}": float(v) for s, v in stages.items()})
        row.update({f"reached_{s}": float(v) for s, v in funnel_stages(traj, cumulative=False).items()})
    return row


def qa_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Aggregate metrics as one flat dict of floats (means, rates and funnel counts).

    EM/F1 are averaged over answerable items only; abstention on unanswerable items is reported
    separately.  Funnel counts are cumulative; ``funnel_<stage>_rate`` divides by ``funnel_n``, and
    ``reached_<stage>_rate`` is the same stage counted on its own (not requiring the earlier ones).
    """
    if not trajs:
        return {"n": 0.0}
    rows = [score_trajectory(t) for t in trajs]
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    out: dict[str, float] = {"n": float(len(rows)), "n_answerable": float(len(answerable))}
    if answerable:
        out["em"] = mean(r["em"] for r in answerable)
        out["f1"] = mean(r["f1"] for r in answerable)
        out["incorrect_rate"] = mean(r["incorrect"] for r in answerable)
        attempted = [r for r in answerable if r["answered"]]
        if attempted:
            out["em_when_answered"] = mean(r["em"] for r in attempted)
    out["answer_rate"] = mean(r["answered"] for r in rows)
    out["abstain_rate"] = mean(r["abstained"] for r in rows)
    if unanswerable:
        out["n_unanswerable"] = float(len(unanswerable))
        out["abstention_unanswerable"] = mean(r["abstained"] for r in unanswerable)
    # citations_per_claim, support_rate and answer_words feed the reward-hacking monitor (G4).
    for key in (
        "citation_precision",
        "citation_recall",
        "citations_per_claim",
        "support_rate",
        "answer_words",
    ):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = mean(values)
            if key.startswith("citation_"):
                out[f"{key}_n"] = float(len(values))
    for key in (
        "turns",
        "searches",
        "opens",
        "finds",
        "invalid_turns",
        "tool_calls",
        "generated_tokens",
        "seconds",
    ):
        out[key] = mean(r[key] for r in rows)
    out["total_seconds"] = sum(r["seconds"] for r in rows)
    with_gold = [r for r in rows if "funnel_retrieved" in r]
    out["funnel_n"] = float(len(with_gold))
    if with_gold:
        for stage in FUNNEL_STAGES:
            count = sum(r[f"funnel_{stage}"] for r in with_gold)
            out[f"funnel_{stage}"] = float(count)
            out[f"funnel_{stage}_rate"] = count / len(with_gold)
            out[f"reached_{stage}_rate"] = sum(r[f"reached_{stage}"] for r in with_gold) / len(with_gold)
    return out
