"""A directory of live responses keyed by their request: the disk cache, the recorder and the replayer.

One format serves three jobs.  The cache saves money and time on repeated queries; ``--record DIR``
keeps every search/fetch a live run made, so the run becomes an offline evaluation or training set;
``--replay DIR`` serves exactly those responses back with no network at all.  Each response is one
small JSON file ``DIR/<kind>/<sha256 of the request>.json`` holding the request next to the response,
so a person can read (or grep) what the agent saw, and files are written atomically so a crash or a
concurrent writer never leaves half a record.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text

FORMAT_VERSION = 1


def request_key(kind: str, request: dict[str, Any]) -> str:
    """Stable id of a request: the same search or fetch always maps to the same file."""
    canonical = json.dumps({"kind": kind, "request": request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseStore:
    """Request → response records in a directory (see the module docstring for the layout)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, kind: str, request: dict[str, Any]) -> Path:
        return self.root / kind / f"{request_key(kind, request)}.json"

    def get(self, kind: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The stored record (``{"response": ...}`` or ``{"error": ...}``), or None when absent.

        An unreadable file counts as absent: a cache must never turn a corrupt entry into a crash;
        the caller fetches again (or, when replaying, reports a miss naming the file).
        """
        path = self.path(kind, request)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or record.get("request") != request:
            return None
        return record

    def put_response(self, kind: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        self._put(kind, request, {"response": response})

    def put_error(self, kind: str, request: dict[str, Any], error_type: str, message: str) -> None:
        """Record a permanent failure, so that a replay shows the agent the same error the live run did."""
        self._put(kind, request, {"error": {"type": error_type, "message": message}})

    def _put(self, kind: str, request: dict[str, Any], body: dict[str, Any]) -> None:
        record = {"version": FORMAT_VERSION, "kind": kind, "request": request, **body}
        atomic_write_text(self.path(kind, request), json.dumps(record, ensure_ascii=False, indent=1))

    def count(self, kind: str | None = None) -> int:
        """How many records are stored (of one kind, or all)."""
        pattern = f"{kind}/*.json" if kind else "*/*.json"
        return sum(1 for _ in self.root.glob(pattern))
