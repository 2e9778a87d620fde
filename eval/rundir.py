"""The on-disk layout of an eval run, and reading it back safely.

A run directory holds:
  run.json            what is being evaluated (benchmark, model, agent config), written at start
  trajectories.jsonl  one trajectory per line, appended as each question finishes
  results.json        metrics + exact config, versions and index manifest, written at the end

Trajectories are appended the moment they finish, so an interrupted eval loses at most the line
being written.  Resuming scans the JSONL (OpenResearcher-style): a broken *last* line is the
signature of an interruption and is dropped; a broken line in the middle is corruption and
stops the run, because silently skipping it would make the metrics lie about what was evaluated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from research_agent.trajectory import Trajectory

RUN_SCHEMA = 1
TRAJECTORIES = "trajectories.jsonl"
RESULTS = "results.json"
RUN = "run.json"


class RunDirError(RuntimeError):
    """A run directory is unreadable, from an incompatible schema, or does not match the request."""


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise RunDirError(f"{path} is missing: {what}") from e
    except json.JSONDecodeError as e:
        raise RunDirError(f"{path} is not valid JSON ({e}); delete it and re-run") from e
    if not isinstance(data, dict):
        raise RunDirError(f"{path} should hold a JSON object")
    return data


def check_schema(data: dict[str, Any], path: Path) -> None:
    """Refuse run files from another schema instead of misreading them."""
    version = data.get("schema")
    if version == RUN_SCHEMA:
        return
    if version is None or (isinstance(version, int) and version < RUN_SCHEMA):
        raise RunDirError(
            f"{path} was written by an older eval (schema {version}, this code reads {RUN_SCHEMA}); "
            f"re-run the evaluation into a new directory (python -m eval qa ... --out NEW_DIR)"
        )
    raise RunDirError(
        f"{path} has schema {version}, newer than this code ({RUN_SCHEMA}); upgrade research-agent"
    )


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def scan_trajectories(path: Path, repair: bool = True) -> list[Trajectory]:
    """Read finished trajectories; drop (and with ``repair`` truncate away) a broken last line."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    trajs: list[Trajectory] = []
    good_bytes = 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_bytes += len(line) + (1 if i < len(lines) - 1 else 0)
            continue
        try:
            trajs.append(Trajectory.from_json(line.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            if any(rest.strip() for rest in lines[i + 1 :]):
                raise RunDirError(
                    f"{path}: line {i + 1} is corrupt ({e}) but later lines are fine; "
                    "fix or delete that line by hand, then resume"
                ) from e
            if repair:  # an interrupted write: cut the partial line off so appends stay clean
                with open(path, "r+b") as f:
                    f.truncate(good_bytes)
                    f.flush()
                    os.fsync(f.fileno())
            break
        good_bytes += len(line) + 1
    if repair and trajs and not raw[:good_bytes].endswith(b"\n") and good_bytes == len(raw):
        with open(path, "ab") as f:  # a complete last record without its newline
            f.write(b"\n")
    seen: set[str] = set()
    unique = []
    for t in trajs:
        if t.id not in seen:
            seen.add(t.id)
            unique.append(t)
    return unique


class TrajectoryWriter:
    """Appends one JSON line per finished trajectory, flushed and fsynced so a crash loses nothing."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, traj: Trajectory) -> None:
        self._f.write(traj.to_json() + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_results(run_dir: str | Path) -> dict[str, Any]:
    """results.json of a finished run, schema-checked."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} does not exist")
    path = run_dir / RESULTS
    if not path.exists() and (run_dir / TRAJECTORIES).exists():
        raise RunDirError(
            f"{run_dir} has trajectories but no {RESULTS}: the eval was interrupted; "
            "re-run the same `python -m eval qa` command to resume it"
        )
    data = read_json(path, "not an eval run directory (python -m eval qa --out DIR writes one)")
    check_schema(data, path)
    if not isinstance(data.get("metrics"), dict):
        raise RunDirError(f"{path} has no 'metrics' object")
    return data
