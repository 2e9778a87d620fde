"""The on-disk layout of an eval run, and reading it back safely.

A run directory holds:
  run.json            what is being evaluated (benchmark, model, agent config), written at start
  trajectories.jsonl  one trajectory per line, appended as each question finishes
  results.json        metrics + exact config, versions and index manifest, written at the end

Trajectories go through the one trajectory store (``research_agent.store``): appended the moment
they finish, a torn last line dropped on resume, a corrupt middle line an error, one run at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from research_agent.store import TRAJECTORIES, StoreError

RUN_SCHEMA = 1
RESULTS = "results.json"
RUN = "run.json"


# A run directory is unreadable, from an incompatible schema, or does not match the request; the
# trajectory store's error, so a corrupt trajectories.jsonl and a bad run.json read the same.
RunDirError = StoreError


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
