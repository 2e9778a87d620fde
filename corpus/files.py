"""Files every package reads and writes: the cache directory, atomic writes, JSONL records, and the
seeded subset that every ``--limit`` takes of them.

The lowest module of the house: ``corpus``, ``synth``, ``eval``, the agent and the trainer all use
it, and it imports nothing of the project, so none of them has to import another to share a helper.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """The per-user cache (override with RESEARCH_AGENT_CACHE)."""
    root = os.environ.get("RESEARCH_AGENT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "research-agent"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temp file and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """All records, one JSON object a line, written atomically."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def read_jsonl(path: str | Path, *, required: tuple[str, ...] = (), split: str | None = None) -> list[dict]:
    """The JSON objects of a JSONL file that have every ``required`` field (and, given ``split``, that
    split); a line that is not JSON, not an object or lacks a field is skipped and reported on stderr."""
    out, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                print(f"{path}:{n}: not JSON, skipped", file=sys.stderr)
                continue
            missing = [k for k in required if k not in rec] if isinstance(rec, dict) else list(required) or ["{}"]
            if missing:
                bad += 1
                print(f"{path}:{n}: no {', '.join(repr(m) for m in missing)} field, skipped", file=sys.stderr)
                continue
            if split is None or rec.get("split") == split:
                out.append(rec)
    if bad:
        print(f"{path}: {bad} broken lines skipped", file=sys.stderr)
    return out


def content_hash(path: Path) -> str:
    """sha256 of a file, or of a directory's files (relative names and contents, dotfiles left out)."""
    h = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    files = (q for q in path.rglob("*") if q.is_file() and not any(x.startswith(".") for x in q.relative_to(path).parts))
    for p in sorted(files):
        h.update(str(p.relative_to(path)).encode() + b"\0" + content_hash(p).encode() + b"\0")
    return h.hexdigest()


def seeded_subset(items: list, limit: int | None, seed: int = 0) -> list:
    """A seeded shuffle, then the first ``limit``: what ``--limit N`` means in every command. Smaller
    subsets are prefixes of larger ones (same seed), so a larger limit extends a run instead of
    starting another; the first N of a file would be whatever order the file happens to have."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    order = list(items)
    random.Random(seed).shuffle(order)
    return order if limit is None else order[:limit]
