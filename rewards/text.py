"""Small text tools shared by the rewards: SQuAD normalization, tokens, numbers, sentences.

Kept in one place so that every reward (F1, CaRR support, atomic thoughts, reports) agrees on what a
"word" and a "number" are.
"""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation) | {"“", "”", "‘", "’", "«", "»", "—", "–", "…", "。", "，", "、", "？", "！"}
_WORD = re.compile(r"[\w']+", re.UNICODE)
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
STOPWORDS = frozenset(
    "the a an of in on and or is are was were to it its by for with as at from that this be been has have "
    "had which who what when where how why do does did not no but so if then than into about".split()
)


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lower case, drop punctuation and articles (a/an/the), collapse whitespace."""
    if text is None:
        return ""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def tokens(text: str) -> list[str]:
    """Normalized answer tokens (the unit of token F1)."""
    return normalize_answer(text).split()


def content_words(text: str) -> set[str]:
    """Lower-cased words minus stopwords: what a claim asserts, for overlap checks."""
    return {w for w in (t.lower().strip("'") for t in _WORD.findall(text or "")) if w and w not in STOPWORDS}


def numbers(text: str) -> set[str]:
    """Numbers in a text, thousands separators removed ("1,200" == "1200", "3.0" == "3")."""
    out = set()
    for raw in _NUMBER.findall(text or ""):
        n = raw.replace(",", "")
        try:
            value = float(n)
        except ValueError:
            continue
        out.add(str(int(value)) if value.is_integer() else str(value))
    return out


def sentences(text: str) -> list[str]:
    """Split text into sentences (and lines)."""
    return [s.strip() for s in _SENTENCE.split(text or "") if s.strip()]


def word_count(text: str) -> int:
    return len(_WORD.findall(text or ""))
