"""Ingest (A1): turn files and directories into ``Document``s.

Supported: HTML (``.html``/``.htm``: trafilatura's main text, title and outgoing links, boilerplate
such as navigation, footers and cookie banners dropped), Markdown (``.md``/``.markdown``), plain
text (``.txt``) and JSONL records ``{"id", "url", "title", "text"}`` (``.jsonl``; other keys go to
``meta``).  A document's id is its path relative to the source root (a JSONL record's id is its
``id`` field).

Bad input never stops a build: a broken or binary file, undecodable bytes, an empty document, a
JSONL line that is not JSON or lacks a field is skipped with one line on stderr naming the file
and the reason, and counted in ``Skips`` (which the manifest records).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

from corpus.documents import Document

HTML_EXT = {".html", ".htm", ".xhtml"}
MARKDOWN_EXT = {".md", ".markdown"}
TEXT_EXT = {".txt", ".text"}
JSONL_EXT = {".jsonl"}
SUPPORTED = HTML_EXT | MARKDOWN_EXT | TEXT_EXT | JSONL_EXT
MAX_FILE_BYTES = 50 * 1024 * 1024


class SourceError(ValueError):
    """A source path that does not exist."""


@dataclass
class Skips:
    """Items left out of a build, each with where it came from and why."""

    items: list[dict] = field(default_factory=list)
    quiet: bool = False

    def add(self, where: str, reason: str) -> None:
        self.items.append({"source": where, "reason": reason})
        if not self.quiet:
            print(f"skipped {where}: {reason}", file=sys.stderr, flush=True)

    def __len__(self) -> int:
        return len(self.items)


def _read_text(path: Path, skips: Skips, rel: str) -> str | None:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            skips.add(rel, f"file too large ({size:,} bytes > {MAX_FILE_BYTES:,})")
            return None
        data = path.read_bytes()
    except OSError as e:
        skips.add(rel, f"unreadable file ({e.strerror or e})")
        return None
    if b"\x00" in data[:8192]:
        skips.add(rel, "binary file (contains NUL bytes)")
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        skips.add(rel, f"undecodable bytes (not UTF-8 at byte {e.start})")
        return None


def _clean_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t\u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def _resolve_link(target: str, doc_id: str, base_url: str, local_ids: set[str]) -> str | None:
    """A local document id when ``target`` is a file of the same source root, else an absolute URL."""
    target = (target or "").strip()
    if not target or target.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
        return None
    target, _ = urldefrag(target)
    if not target:
        return None
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        return target
    if parts.scheme or parts.netloc:
        return None
    local = posixpath.normpath(posixpath.join(posixpath.dirname(doc_id), parts.path))
    if local in local_ids:
        return local
    if base_url:
        return urljoin(base_url, target)
    return None


# ---------------------------------------------------------------------------------------------- HTML


def html_document(html: str, doc_id: str, local_ids: set[str] | None = None) -> Document | None:
    """Main text, title and outgoing links of one HTML page (None when it has no main text)."""
    import trafilatura

    main = trafilatura.bare_extraction(html, with_metadata=True, include_links=False, include_comments=False)
    if main is None or not (main.text or "").strip():
        return None
    url = main.url or ""
    title = (main.title or "").strip() or posixpath.splitext(posixpath.basename(doc_id))[0]
    # a second pass keeps the links of the main text (the first gives text without link markup)
    linked = trafilatura.bare_extraction(html, include_links=True, include_comments=False)
    links: list[str] = []
    if linked is not None and linked.body is not None:
        for ref in linked.body.iter("ref"):
            link = _resolve_link(ref.get("target", ""), doc_id, url, local_ids or set())
            if link and link not in links and link != doc_id:
                links.append(link)
    meta = {"source": "html"}
    for key in ("author", "date", "sitename", "description"):
        value = getattr(main, key, None)
        if value:
            meta[key] = str(value)
    return Document(id=doc_id, title=title, text=_clean_text(main.text), url=url, links=links, meta=meta)


# ------------------------------------------------------------------------------------- Markdown / text

_MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def markdown_document(text: str, doc_id: str, local_ids: set[str] | None = None) -> Document | None:
    text = _clean_text(text)
    if not text:
        return None
    title = ""
    for line in text.splitlines():
        m = re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            title = m.group(1)
            break
    title = title or posixpath.splitext(posixpath.basename(doc_id))[0]
    links: list[str] = []
    for m in _MD_LINK.finditer(text):
        link = _resolve_link(m.group(1), doc_id, "", local_ids or set())
        if link and link not in links and link != doc_id:
            links.append(link)
    return Document(id=doc_id, title=title, text=text, links=links, meta={"source": "markdown"})


def text_document(text: str, doc_id: str) -> Document | None:
    text = _clean_text(text)
    if not text:
        return None
    title = posixpath.splitext(posixpath.basename(doc_id))[0]
    return Document(id=doc_id, title=title, text=text, meta={"source": "text"})


# ---------------------------------------------------------------------------------------------- JSONL


def jsonl_documents(path: Path, rel: str, skips: Skips) -> Iterator[Document]:
    """Records ``{"id", "url", "title", "text"}``: ``id`` and ``text`` are required, the rest optional."""
    raw = _read_text(path, skips, rel)
    if raw is None:
        return
    for no, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{rel}:{no}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            skips.add(where, f"not JSON ({e.msg})")
            continue
        if not isinstance(rec, dict):
            skips.add(where, f"not a JSON object (a {type(rec).__name__})")
            continue
        missing = [k for k in ("id", "text") if k not in rec]
        if missing:
            skips.add(where, f"missing field {', '.join(repr(k) for k in missing)}")
            continue
        doc_id, text = rec["id"], rec["text"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
            skips.add(where, "field 'id' is empty or not a string")
            continue
        if not isinstance(text, str):
            skips.add(where, f"field 'text' is not a string (a {type(text).__name__})")
            continue
        text = _clean_text(text)
        if not text:
            skips.add(where, "empty document (no text)")
            continue
        title, url = rec.get("title"), rec.get("url")
        meta = {k: v for k, v in rec.items() if k not in ("id", "text", "title", "url", "links", "meta")}
        if isinstance(rec.get("meta"), dict):
            meta.update(rec["meta"])
        meta.setdefault("source", "jsonl")
        links = rec.get("links") if isinstance(rec.get("links"), list) else []
        yield Document(
            id=str(doc_id).strip(),
            title=title.strip() if isinstance(title, str) and title.strip() else str(doc_id),
            text=text,
            url=url if isinstance(url, str) else "",
            links=[str(x) for x in links],
            meta=meta,
        )


# ----------------------------------------------------------------------------------------- the walker


def _files_under(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
    return found


def _file_documents(path: Path, rel: str, skips: Skips, local_ids: set[str]) -> Iterator[Document]:
    ext = path.suffix.lower()
    if ext in JSONL_EXT:
        yield from jsonl_documents(path, rel, skips)
        return
    if ext not in SUPPORTED:
        skips.add(rel, f"unsupported file type ({ext or 'no extension'}); use .html .md .txt or .jsonl")
        return
    raw = _read_text(path, skips, rel)
    if raw is None:
        return
    try:
        if ext in HTML_EXT:
            doc = html_document(raw, rel, local_ids)
        elif ext in MARKDOWN_EXT:
            doc = markdown_document(raw, rel, local_ids)
        else:
            doc = text_document(raw, rel)
    except Exception as e:  # a broken file must not stop the build
        skips.add(rel, f"could not parse ({type(e).__name__}: {e})")
        return
    if doc is None:
        skips.add(rel, "empty document (no main text)")
        return
    yield doc


def path_documents(sources: Iterable[str | Path], skips: Skips) -> Iterator[Document]:
    """Documents from files and directories; ids are paths relative to each source root."""
    for src in sources:
        root = Path(src).expanduser()
        if not root.exists():
            raise SourceError(f"source {src} does not exist")
        if root.is_dir():
            files = _files_under(root)
            rels = [f.relative_to(root).as_posix() for f in files]
            local_ids = set(rels)
            for f, rel in zip(files, rels, strict=True):
                yield from _file_documents(f, rel, skips, local_ids)
        else:
            yield from _file_documents(root, root.name, skips, {root.name})


def file_source_hashes(sources: Iterable[str | Path]) -> dict[str, str]:
    """A content hash per source root (sha256 over relative paths and bytes)."""
    hashes: dict[str, str] = {}
    for src in sources:
        root = Path(src).expanduser()
        h = hashlib.sha256()
        files = _files_under(root) if root.is_dir() else [root]
        for f in files:
            rel = f.relative_to(root).as_posix() if root.is_dir() else f.name
            h.update(rel.encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
        hashes[str(root.resolve())] = f"sha256:{h.hexdigest()}"
    return hashes
