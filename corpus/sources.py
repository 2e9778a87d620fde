"""Ingest (A1): turn files and directories into ``Document``s.

Supported: HTML (``.html``/``.htm``: trafilatura's main text, title and outgoing links, boilerplate
such as navigation, footers and cookie banners dropped), Markdown (``.md``/``.markdown``), plain
text (``.txt``) and JSONL records ``{"id", "url", "title", "text"}`` (``.jsonl``; other keys go to
``meta``).  A document's id is its path relative to the source root (a JSONL record's id is its
``id`` field).

Bad input never stops a build: a broken or binary file, undecodable bytes, an empty document, a
JSONL line that is not JSON, nested deeper than ``MAX_JSON_DEPTH`` or lacks a field is skipped with
one line on stderr naming the file and the reason, and counted in ``Skips`` (which the manifest
records).  A JSONL file is judged line by line: a NUL byte or a non-UTF-8 byte costs its own line,
not the file's other records.  Only regular files are read: a FIFO, a device or a socket (also
behind a symlink, such as one to ``/dev/zero``) is skipped without being read, and a file larger
than ``MAX_FILE_BYTES`` (50 MiB) is skipped, judged by the bytes actually read, not by the size the
file system reports.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import stat
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
MAX_FILE_BYTES = 50 * 1024 * 1024  # per source file; a larger one is skipped, never read whole
MAX_JSON_DEPTH = 100  # nesting of one JSONL record; deeper is skipped (the writer must not recurse past it)


class SourceError(ValueError):
    """A source path that does not exist."""


class UnreadableSource(OSError):
    """A source file that is not read: not a regular file, or larger than ``MAX_FILE_BYTES``."""


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


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_source_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else ``UnreadableSource`` or ``OSError``.

    The file's type is checked before it is opened (a FIFO would block the open, a device such as
    ``/dev/zero`` never ends), and again on the open descriptor, so a path swapped in between is
    caught too.  The size is judged by what is read (``limit + 1`` bytes at most), since files such
    as those of ``/proc`` report a size of 0.
    """
    st = os.stat(path)  # follows symlinks: a link to /dev/zero is judged by its target
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableSource(f"not a regular file ({_file_kind(st.st_mode)}); give files or directories")
    if st.st_size > limit:
        raise UnreadableSource(f"file too large ({st.st_size:,} bytes > {limit:,})")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableSource(f"not a regular file ({_file_kind(mode)}); give files or directories")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnreadableSource(f"file too large (more than {limit:,} bytes)")
    return data


def _read_bytes(path: Path, skips: Skips, rel: str) -> bytes | None:
    try:
        return read_source_bytes(path)
    except UnreadableSource as e:
        skips.add(rel, str(e))
    except OSError as e:
        skips.add(rel, f"unreadable file ({e.strerror or e})")
    return None


def _read_text(path: Path, skips: Skips, rel: str) -> str | None:
    data = _read_bytes(path, skips, rel)
    if data is None:
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


def json_depth(value: object) -> int:
    """How deeply lists and dicts nest in ``value`` (iteratively: a deep value must not recurse here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (list, tuple)):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
    return deepest


def _jsonl_lines(data: bytes) -> Iterator[tuple[int, str | None, str]]:
    """``(line number, text or None, why not)`` per line, split at b"\\n" only.

    Each line is decoded on its own, so one bad byte costs one line; ``str.splitlines`` is not used
    because it also splits at U+2028, U+0085 and the like, which JSON allows raw inside a string.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for no, raw in enumerate(data.split(b"\n"), 1):
        if b"\x00" in raw:
            yield no, None, "binary line (contains NUL bytes)"
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield no, None, f"undecodable bytes (not UTF-8 at byte {e.start} of the line)"
            continue
        yield no, line, ""


_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a strictly decoded line has none other


def writable_json(value: object) -> bool:
    """Whether ``value`` can be written as UTF-8 JSON: a lone surrogate (a JSON escape such as
    \\ud800 alone), a value JSON cannot hold or one nested past the recursion limit cannot."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def _printable(name: str) -> str:
    """A file name as text, its undecodable bytes shown as escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


MAX_BAD_LEADING_LINES = 20  # a .jsonl file whose first 20 non-empty lines are all bad is not JSONL


def jsonl_documents(path: Path, rel: str, skips: Skips) -> Iterator[Document]:
    """Records ``{"id", "url", "title", "text"}``: ``id`` and ``text`` are required, the rest optional.

    Each bad line is skipped on its own; a file whose first ``MAX_BAD_LEADING_LINES`` non-empty lines
    are all bad (a binary file named .jsonl) is given up with one more line, not one per line.
    """
    data = _read_bytes(path, skips, rel)
    if data is None:
        return
    good = bad = 0
    for no, line, why in _jsonl_lines(data):
        if line is not None and not line.strip():
            continue
        doc, why = _jsonl_document(line) if line is not None else (None, why)
        if doc is not None:
            good += 1
            yield doc
            continue
        skips.add(f"{rel}:{no}", why)
        bad += 1
        if not good and bad >= MAX_BAD_LEADING_LINES:
            skips.add(rel, f"not JSONL (its first {bad} lines are bad); the rest of the file is not read")
            return


def _jsonl_document(line: str) -> tuple[Document | None, str]:
    """One JSONL line as a ``Document``, or None and the reason it is skipped."""
    try:
        rec = json.loads(line)
    except RecursionError:
        return None, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg})"
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        return None, f"not JSON ({e})"
    if not isinstance(rec, dict):
        return None, f"not a JSON object (a {type(rec).__name__})"
    if json_depth(rec) > MAX_JSON_DEPTH:
        return None, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    if _LONE_SURROGATE_ESCAPE.search(line) and not writable_json(rec):
        return None, "a lone surrogate (an unpaired \\ud800-\\udfff escape) is not text"
    missing = [k for k in ("id", "text") if k not in rec]
    if missing:
        return None, f"missing field {', '.join(repr(k) for k in missing)}"
    doc_id, text = rec["id"], rec["text"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
        return None, "field 'id' is empty or not a string"
    if not isinstance(text, str):
        return None, f"field 'text' is not a string (a {type(text).__name__})"
    text = _clean_text(text)
    if not text:
        return None, "empty document (no text)"
    title, url = rec.get("title"), rec.get("url")
    meta = {k: v for k, v in rec.items() if k not in ("id", "text", "title", "url", "links", "meta")}
    if isinstance(rec.get("meta"), dict):
        meta.update(rec["meta"])
    meta.setdefault("source", "jsonl")
    links = rec.get("links") if isinstance(rec.get("links"), list) else []
    doc = Document(
        id=str(doc_id).strip(),
        title=title.strip() if isinstance(title, str) and title.strip() else str(doc_id),
        text=text,
        url=url if isinstance(url, str) else "",
        links=[str(x) for x in links],
        meta=meta,
    )
    return doc, ""


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
            raise SourceError(f"source {_printable(str(src))} does not exist")
        if _printable(str(root.resolve())) != str(root.resolve()):
            raise SourceError(f"source path {_printable(str(root))} is not UTF-8; rename it or link to it")
        if root.is_dir():
            files = _files_under(root)
            rels = [f.relative_to(root).as_posix() for f in files]
            local_ids = set(rels)
            for f, rel in zip(files, rels, strict=True):
                if _printable(rel) != rel:
                    skips.add(
                        _printable(rel), "file name is not UTF-8 (a document id must be text); rename it"
                    )
                    continue
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
            h.update(os.fsencode(rel) + b"\0")
            try:
                h.update(read_source_bytes(f))  # never a FIFO or a device: those would hang or never end
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
        hashes[str(root.resolve())] = f"sha256:{h.hexdigest()}"
    return hashes
