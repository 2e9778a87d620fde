"""Check an answer's citations against the text it cites, at answer time (B5).

A citation is "unretrieved" when the agent never saw that chunk (a fabricated id); a claim is
"supported" when the cited text contains its content words and numbers, or (optionally) is close
to it in embedding space.  The result is shown to the user and stored on the answer step, so
rewards and eval can use it without repeating the work.
"""

from __future__ import annotations

import re

from .actions import strip_citations

_WORD = re.compile(r"[\w']+", re.UNICODE)
_NUMBER = re.compile(r"\d[\d,.]*")
_STOP = {"the", "a", "an", "of", "in", "on", "and", "or", "is", "are", "was", "to", "it", "its", "by", "for",
         "with", "as", "at", "from", "that", "this", "be"}


def _content_words(text: str) -> set[str]:
    return {w for w in (t.lower() for t in _WORD.findall(text)) if w not in _STOP}


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def claims(answer: str) -> list[str]:
    """Split an answer into claims (sentences); a short answer is one claim."""
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+|\n+", answer) if p.strip()]
    return parts or ([answer.strip()] if answer.strip() else [])


def claim_supported(claim: str, texts: list[str], semantic: bool = False, threshold: float = 0.55) -> bool:
    words = _content_words(strip_citations(claim))
    if not words or not texts:
        return False
    joined = " ".join(texts)
    nums = _numbers(claim)
    if nums and not nums <= _numbers(joined):
        return False
    overlap = len(words & _content_words(joined)) / len(words)
    if overlap >= 0.8:
        return True
    if semantic:
        from corpus.embed import Embedder

        emb = Embedder()
        vecs = emb.encode([strip_citations(claim), *texts])
        return float((vecs[1:] @ vecs[0]).max()) >= threshold
    return False


def check_citations(answer: str, citations: list[str], retrieved: dict[str, str],
                    semantic: bool = False) -> dict:
    """Return {"citations", "unretrieved", "supported": {claim: bool}, "support_rate"}."""
    unretrieved = [c for c in citations if c not in retrieved]
    texts = [retrieved[c] for c in citations if c in retrieved]
    per_claim = {c: claim_supported(c, texts, semantic=semantic) for c in claims(answer)}
    rate = sum(per_claim.values()) / len(per_claim) if per_claim else 0.0
    return {"citations": list(citations), "unretrieved": unretrieved, "supported": per_claim,
            "support_rate": rate}
