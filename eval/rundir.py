"""The on-disk layout of an eval run, reading it back safely, and which runs a directory may continue.

A run directory holds:
  run.json            what is being evaluated (task type, benchmark or tasks, model, agent config),
                      written at start
  trajectories.jsonl  one trajectory per line, appended as each question or task finishes
  results.json        metrics + exact config, versions and index manifest, written at the end

Trajectories go through the one trajectory store (``research_agent.store``): appended the moment
they finish, a torn last line dropped on resume, a corrupt middle line an error, one run at a time.

run.json's ``config_version`` says how its agent config is laid out; ``migrate`` brings an older one
to today's layout before a resume compares it with the run asked for (``start_run``).
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
# The layout of run.json: 1 = a task_type key, and a code run's agent config with every setting of
# CodeAgentConfig; 2 = without the retired continue_quotes and suggest_search; absent (0) = everything
# written before 1 (``migrate``).  A change to either layout is a new version and a step in ``migrate``.
CONFIG_VERSION = 2
# run.json keys that must match for a resume to continue the same experiment (a QA run has no tasks,
# mode or docs, a code run no bench, corpus, memory or format hints: absent on both sides is the same)
IDENTITY_KEYS = ("task_type", "bench", "tasks", "mode", "model", "adapter", "endpoint", "agent_config", "corpus",
                 "docs", "memory", "format_hints")


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


# ---- which runs a directory may continue --------------------------------------------------------
# Code-agent settings added after runs were made, at the value that reproduces those runs: a run.json
# without config_version may lack any of them.
_UNRECORDED_CODE_SETTINGS = {
    "test_feedback": False,  # runs made before the option: a submission ended the task
    "observation_format": "inline",
    "stop_loops": False,
    "submit_hint": False,
    "stub_submits_last_run": False,
    "flag_repeats": False,
    "recall_passing_run": False,
    "submit_last_run_at_limit": False,
    "redraw_repeats": 0,
    "redraw_temperature": 1.0,  # read only with redraw_repeats, absent only where that is 0
    "redraw_failed_runs": False,  # runs before the option redrew failed submissions' code only
    "redraw_seed": 0,  # runs before seeded redraws drew unseeded; they resume as seed 0 (a sample either way)
}
# Code-agent settings a run never reads, so they make no other run: no-tools' one turn is over before
# any result is shown (research_agent.code.env), and some switches act only on test feedback.
_NO_TOOLS_UNREAD = frozenset({"observation_format", "test_feedback", "submit_hint", "stub_submits_last_run",
                              "flag_repeats", "recall_passing_run", "submit_last_run_at_limit",
                              "redraw_failed_runs"})
_FEEDBACK_ONLY = frozenset({"flag_repeats", "recall_passing_run", "redraw_failed_runs"})
# Code-agent settings since retired, at the value every run now has (docs/code-agent.md, retired switches)
_RETIRED_CODE_SETTINGS = {"continue_quotes": False, "suggest_search": False}


def migrate(run: dict[str, Any], path: Path | str = RUN) -> dict[str, Any]:
    """``run`` (a run.json) in today's layout (``CONFIG_VERSION``), so that one comparison serves runs
    of any age.

    Version 0 (no ``config_version``) → 1: the run gets its ``task_type`` (a code run is one with a
    ``mode``), and a code run's agent config the settings younger than it, at the values that
    reproduce it.  1 → 2: a code run's agent config loses the retired settings where they were off,
    as today's runs have them; one that was on stays, so that the run is not taken for today's.
    """
    version = run.get("config_version", 0)
    if not isinstance(version, int) or version < 0:
        raise RunDirError(f"{path} has config version {version!r}, which no eval writes; use a new --out directory")
    if version > CONFIG_VERSION:
        raise RunDirError(f"{path} has config version {version}, newer than this code ({CONFIG_VERSION}); "
                          "upgrade research-agent")
    if version == CONFIG_VERSION:
        return run
    code = run.get("mode") is not None
    out = {**run, "config_version": CONFIG_VERSION,
           "task_type": run.get("task_type") or ("code" if code else "research")}
    cfg = run.get("agent_config")
    if code and isinstance(cfg, dict):
        if version < 1:
            cfg = {**_UNRECORDED_CODE_SETTINGS, **cfg}
        out["agent_config"] = {k: v for k, v in cfg.items()
                               if not (k in _RETIRED_CODE_SETTINGS and v == _RETIRED_CODE_SETTINGS[k])}
    return out


def _read_settings(run: dict[str, Any]) -> dict[str, Any]:
    """The agent settings ``run`` reads (a code run's config less what its mode and feedback never read)."""
    cfg = run.get("agent_config")
    if run.get("task_type") != "code" or not isinstance(cfg, dict):
        return cfg
    unread = set(_NO_TOOLS_UNREAD) if run.get("mode") == "no-tools" else set()
    if not cfg.get("test_feedback"):
        unread |= _FEEDBACK_ONLY
    return {k: v for k, v in cfg.items() if k not in unread}


def _same_adapter(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """An adapter is the same when its files are, wherever it lies (a run restored into another
    directory, as a recipe stage resumed in a later session, names it by another path); a run that
    recorded no hash of its adapter is known by the path alone."""
    if old.get("adapter_sha256") and new.get("adapter_sha256"):
        return old["adapter_sha256"] == new["adapter_sha256"]
    return old.get("adapter") == new.get("adapter")


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The identity settings in which ``old`` and ``new`` differ, said setting by setting."""
    diff = []
    for key in IDENTITY_KEYS:
        if key == "adapter":
            if not _same_adapter(old, new):
                diff.append(f"adapter: {old.get('adapter')!r} → {new.get('adapter')!r}")
        elif key == "agent_config" and isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            was, now = _read_settings(old), _read_settings(new)
            diff += [f"agent_config.{name}: {was.get(name)!r} → {now.get(name)!r}"
                     for name in sorted(set(was) | set(now)) if was.get(name) != now.get(name)]
        elif old.get(key) != new.get(key):
            diff.append(f"{key}: {old.get(key)!r} → {new.get(key)!r}")
    return diff


def start_run(out_dir: Path, run: dict[str, Any]) -> None:
    """Write run.json; on resume first check (after ``migrate``) that the directory holds the same experiment.

    Only identity settings (``IDENTITY_KEYS``) must match: a larger ``limit`` with the same seed extends
    the subset (smaller subsets are prefixes), so what was already answered is kept.
    """
    path = out_dir / RUN
    if path.exists():
        old = read_json(path, "")
        check_schema(old, path)
        diff = _differences(migrate(old, path), run)
        if diff:
            raise RunDirError(f"{out_dir} holds a different run ({'; '.join(diff)}); use a new --out directory "
                              "or delete the old one")
    elif (out_dir / TRAJECTORIES).exists():
        raise RunDirError(f"{out_dir} has trajectories but no {RUN}: it was not written by this eval; "
                          "use a new --out directory")
    write_json(path, run)
