"""QA synthesis from a corpus (D1): single-hop facts and multi-hop walks over the link graph.

Questions come from structured fields (Factbook: capital, population, area, region, borders;
Wikipedia: title/description), so gold answers are exact and need no LLM.  Multi-hop questions
walk the border-country links (Tongyi/WebSailor style) and raise difficulty by obfuscating the
entity ("the country whose capital is Paris" instead of "France").  Every item carries the chain
of supporting chunks and one rubric per hop (what the CaRR reward checks), is verified (the
answer occurs in its supporting text), deduplicated, and split train/dev/test *by document*, so
no fact of a test document is trained on.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from corpus.documents import Chunk, Document
from corpus.factbook import is_country
from corpus.files import read_jsonl as _read_jsonl


class SynthesisError(ValueError):
    """The corpus cannot yield the requested questions."""


@dataclass
class QAItem:
    id: str
    question: str
    answers: list[str]
    kind: str  # capital, population, borders-both, capital-of-bordering ...
    hops: int
    supporting: list[str]  # chunk ids, one per hop
    supporting_docs: list[str]
    rubrics: list[dict] = field(default_factory=list)
    split: str = ""
    needed_calls: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def _clean_number(text: str | None) -> str | None:
    if not text:
        return None
    first = re.split(r"[;(]", text)[0].strip()
    return first or None


def _split_for(doc_ids: Iterable[str], dev: float, test: float, salt: str) -> str:
    """Deterministic split by document: an item is test if any of its documents is a test doc."""
    splits = []
    for d in doc_ids:
        h = int(hashlib.sha256(f"{salt}:{d}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        splits.append("test" if h < test else "dev" if h < test + dev else "train")
    return "test" if "test" in splits else "dev" if "dev" in splits else "train"


def _rubric(n: int, fact: str, entity: str, doc_id: str, chunk_id: str, answer_link: bool = False) -> dict:
    return {"id": f"r{n}", "fact": fact, "entity": entity, "doc": doc_id, "chunk": chunk_id,
            "answer_link": answer_link}


class QASynthesizer:
    """Generate verified QA items from documents and their chunks."""

    def __init__(self, documents: list[Document], chunks_of, *, seed: int = 0):
        self.docs = {d.id: d for d in documents}
        self.chunks_of = chunks_of  # doc_id -> list[Chunk]
        self.rng = random.Random(seed)
        # the European Union's profile lists its outer borders: as a bridge it made 35 of the 191 two-hop
        # test questions ask for "the country" that is the EU
        self.countries = {d.id: d for d in documents if is_country(d.meta)}

    def _support(self, doc_id: str, answer: str, label: str = "") -> str | None:
        """The first chunk of ``doc_id`` whose text holds the answer (and the label, if given)."""
        chunks: list[Chunk] = self.chunks_of(doc_id)
        for c in chunks:
            if answer.lower() in c.text.lower() and (not label or label.lower() in c.text.lower()):
                return c.id
        for c in chunks:
            if answer.lower() in c.text.lower():
                return c.id
        return None

    # ---- single hop -----------------------------------------------------------------------------
    def single_hop(self) -> list[QAItem]:
        items: list[QAItem] = []
        for doc in self.countries.values():
            m, name = doc.meta, doc.meta.get("country") or doc.title
            facts = [
                ("capital", f"What is the capital of {name}?", m.get("capital"), "Capital:"),
                ("population", f"What is the population of {name}?", _clean_number(m.get("population")),
                 "Population:"),
                ("area", f"What is the total area of {name}?", _clean_number(m.get("area")), "Area:"),
                ("region", f"In which region of the world is {name}?", m.get("region"), "Region:"),
            ]
            for kind, q, ans, label in facts:
                if not ans:
                    continue
                cid = self._support(doc.id, ans, label)
                if cid is None:
                    continue
                items.append(QAItem("", q, [ans], kind, 1, [cid], [doc.id],
                                    [_rubric(1, f"the {kind} of {name} is {ans}", ans, doc.id, cid, True)]))
            cap = m.get("capital")
            if cap:
                cid = self._support(doc.id, cap, "Capital:")
                if cid and self._support(doc.id, name):
                    items.append(QAItem("", f"Which country has {cap} as its capital?", [name],
                                        "country-of-capital", 1, [cid], [doc.id],
                                        [_rubric(1, f"{cap} is the capital of {name}", name, doc.id, cid, True)]))
        for doc in self.docs.values():
            desc = doc.meta.get("description")
            if doc.meta.get("source") != "wikipedia-vital" or not desc or len(desc) < 12:
                continue
            if doc.title.lower() in desc.lower():
                continue
            cid = self._support(doc.id, doc.title)
            if cid:
                items.append(QAItem("", f"Which subject is described as: {desc}?", [doc.title], "wiki-describe", 1,
                                    [cid], [doc.id],
                                    [_rubric(1, f"{doc.title} is {desc}", doc.title, doc.id, cid, True)]))
        return items

    # ---- multi hop ------------------------------------------------------------------------------
    def multi_hop(self, max_items: int = 2000) -> list[QAItem]:
        linked = {i: [x for x in d.links if x in self.countries] for i, d in self.countries.items()}
        if not any(linked.values()):
            raise SynthesisError("the corpus has no links between documents: multi-hop questions need a link "
                                 "graph (e.g. Factbook border countries); only single-hop questions were made")
        items: list[QAItem] = []
        # "the country that borders both X and Y", when exactly one country does
        by_pair: dict[tuple[str, str], list[str]] = {}
        for z, nbrs in linked.items():
            for i, x in enumerate(nbrs):
                for y in nbrs[i + 1:]:
                    by_pair.setdefault(tuple(sorted((x, y))), []).append(z)
        pairs = [(p, zs[0]) for p, zs in by_pair.items() if len(zs) == 1]
        self.rng.shuffle(pairs)
        for (x, y), z in pairs[: max_items // 2]:
            zd = self.countries[z]
            zn, xn, yn = (self.countries[i].meta.get("country") for i in (z, x, y))
            cz = self._support(z, xn, "Border") and self._support(z, yn, "Border")
            if not cz:
                continue
            items.append(QAItem("", f"Which country borders both {xn} and {yn}?", [zn], "borders-both", 2,
                                [cz], [z, x, y],
                                [_rubric(1, f"{zn} borders {xn}", zn, z, cz, True),
                                 _rubric(2, f"{zn} borders {yn}", zn, z, cz, True)], needed_calls=2))
            cap = zd.meta.get("capital")
            ccap = cap and self._support(z, cap, "Capital:")
            if ccap:
                items.append(QAItem("", f"What is the capital of the country that borders both {xn} and {yn}?",
                                    [cap], "capital-of-bordering", 2, [cz, ccap], [z, x, y],
                                    [_rubric(1, f"{zn} borders {xn} and {yn}", zn, z, cz),
                                     _rubric(2, f"the capital of {zn} is {cap}", cap, z, ccap, True)],
                                    needed_calls=3))
        # obfuscated entity: "the country whose capital is C"
        for doc in self.countries.values():
            m = doc.meta
            cap, pop = m.get("capital"), _clean_number(m.get("population"))
            if not cap or not pop:
                continue
            c1 = self._support(doc.id, cap, "Capital:")
            c2 = self._support(doc.id, pop, "Population:")
            if c1 and c2:
                name = m.get("country")
                items.append(QAItem("", f"What is the population of the country whose capital is {cap}?", [pop],
                                    "population-of-capital-country", 2, [c1, c2], [doc.id],
                                    [_rubric(1, f"{cap} is the capital of {name}", name, doc.id, c1),
                                     _rubric(2, f"the population of {name} is {pop}", pop, doc.id, c2, True)],
                                    needed_calls=2))
        return items[:max_items]

    # ---- everything -------------------------------------------------------------------------------
    def generate(self, *, multi_hop: bool = True, dev: float = 0.1, test: float = 0.15, salt: str = "split-v1",
                 exclude: Iterable[dict] = (), limit: int | None = None) -> tuple[list[QAItem], dict]:
        stats: dict = {"single_hop": 0, "multi_hop": 0, "dropped_unverified": 0, "dropped_duplicate": 0,
                       "dropped_overlap": 0, "warnings": []}
        items = self.single_hop()
        stats["single_hop"] = len(items)
        if multi_hop:
            try:
                more = self.multi_hop()
                stats["multi_hop"] = len(more)
                items += more
            except SynthesisError as e:
                stats["warnings"].append(str(e))
        banned_q = {_norm(e.get("question", "")) for e in exclude}
        banned_a = {_norm(a) for e in exclude for a in e.get("answers", [])}
        seen: set[str] = set()
        kept: list[QAItem] = []
        for it in items:
            if not self.verify(it):
                stats["dropped_unverified"] += 1
                continue
            key = _norm(it.question)
            if key in seen:
                stats["dropped_duplicate"] += 1
                continue
            if key in banned_q or any(_norm(a) in banned_a for a in it.answers):
                stats["dropped_overlap"] += 1
                continue
            seen.add(key)
            it.id = "q" + hashlib.sha256(key.encode()).hexdigest()[:10]
            it.split = _split_for(it.supporting_docs, dev, test, salt)
            kept.append(it)
        self.rng.shuffle(kept)
        if limit:
            kept = kept[:limit]
        stats["kept"] = len(kept)
        stats["splits"] = {s: sum(1 for i in kept if i.split == s) for s in ("train", "dev", "test")}
        stats["kinds"] = {}
        for it in kept:
            stats["kinds"][it.kind] = stats["kinds"].get(it.kind, 0) + 1
        return kept, stats

    def verify(self, item: QAItem) -> bool:
        """The answer occurs in the text of the item's supporting chunks."""
        texts = []
        for cid in item.supporting:
            doc_id = cid.rpartition("#")[0]
            texts += [c.text for c in self.chunks_of(doc_id) if c.id == cid]
        blob = " ".join(texts).lower()
        return bool(blob) and any(a.lower() in blob for a in item.answers)


def _norm(s: str) -> str:
    return re.sub(r"\W+", " ", s.lower()).strip()


def write_jsonl(path: str, items: list[QAItem]) -> None:
    from corpus.files import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(i.to_dict(), ensure_ascii=False) + "\n" for i in items))


def read_jsonl(path: str, split: str | None = None) -> list[dict]:
    """Read a task/QA JSONL file; broken lines are skipped and counted on stderr."""
    return _read_jsonl(path, required=("question",), split=split)
