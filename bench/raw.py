"""The raw output of a bench run: what it measured, on both sides, in every round, and on what machine.

Every script in ``bench/`` ends by writing one JSON file under ``docs/results/bench/`` (``--raw-dir``;
``--raw-dir ''`` writes none).  The file holds the command, the settings, every round's numbers as
measured (not the best of them, not only the median), the CPU and its instruction-set flags, the
load average when the run started and ended, library versions and the git commit, and ``--note``:
what else was running on the machine.  ``bench/table.py`` makes docs/benchmarks.md's "latest
figures" table from these files alone, so a figure there always traces to a committed file.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from argparse import ArgumentParser, Namespace
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RAW_DIR = ROOT / "docs" / "results" / "bench"
SCHEMA = 1
# instruction-set flags that decide which kernels a CPU can run (bf16 / int8 matrix units included)
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16", "amx_int8")
LIBRARIES = ("torch", "transformers", "peft", "trl", "accelerate", "sentence-transformers", "faiss-cpu", "bm25s",
             "numpy")

_STARTED = time.time()
_LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None


def add_raw_flags(p: ArgumentParser) -> None:
    """``--raw-dir`` and ``--note``, the same on every bench."""
    p.add_argument("--raw-dir", default=str(RAW_DIR),
                   help="where the run's raw JSON goes (default docs/results/bench; '' writes none)")
    p.add_argument("--note", default="", help="what else ran on the machine meanwhile (recorded in the raw JSON); "
                   "the figures of a shared machine are read as ratios within one run")


def cpu() -> dict[str, Any]:
    """The CPU's model, vendor, logical CPUs, memory and the flags in ``CPU_FLAGS`` (Linux; less elsewhere)."""
    out: dict[str, Any] = {"machine": platform.machine(), "logical_cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    out["model"] = fields.get("model name", platform.processor())
    out["vendor"] = fields.get("vendor_id", "")
    flags = set(fields.get("flags", "").split())
    out["flags"] = [f for f in CPU_FLAGS if f in flags]
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                out["memory_gb"] = round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    try:
        import torch

        out["torch_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    except Exception:  # noqa: BLE001 - torch missing or too old: the record goes without it
        pass
    return out


def versions() -> dict[str, Any]:
    """Python, the libraries a bench measures, and the commit (with ``dirty`` when the tree had changes)."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for pkg in LIBRARIES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0:
            out["git_commit"] = head.stdout.strip()
            status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
            out["git_dirty"] = bool(dirty)
            if dirty:
                out["git_dirty_paths"] = dirty[:30]
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def raw_record(bench: str, args: Namespace | None, data: dict[str, Any], *, variant: str = "") -> dict[str, Any]:
    """``data`` (the run's measurements) with the run's context: what ``write_raw`` writes."""
    return {
        "schema": SCHEMA,
        "bench": bench,
        "variant": re.sub(r"[^A-Za-z0-9._-]+", "_", variant),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(_STARTED)),
        "seconds": round(time.time() - _STARTED, 1),
        "command": " ".join(["python", os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "-", *sys.argv[1:]]),
        "args": {k: v for k, v in vars(args).items() if k not in ("raw_dir",)} if args is not None else {},
        "note": getattr(args, "note", "") if args is not None else "",
        "machine": {**cpu(), "load_at_start": _LOAD_AT_START,
                    "load_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "versions": versions(),
        **data,
    }


def raw_name(record: dict[str, Any]) -> str:
    """The file name a record is committed under in docs/results/bench/: bench, variant, start time."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.strptime(record["started"][:19], "%Y-%m-%dT%H:%M:%S"))
    return f"{record['bench']}{'-' + record['variant'] if record['variant'] else ''}-{stamp}.json"


def write_raw(bench: str, args: Namespace | None, data: dict[str, Any], *, variant: str = "") -> Path | None:
    """Write ``data`` (the run's measurements) with the run's context; return the file (None if disabled).

    ``variant`` names what the file measures when one bench measures several things that each get
    their own rows (a model, a retriever); the table uses the newest file of each (bench, variant).
    """
    raw_dir = getattr(args, "raw_dir", str(RAW_DIR)) if args is not None else str(RAW_DIR)
    if not raw_dir:
        return None
    record = raw_record(bench, args, data, variant=variant)
    out = Path(raw_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / raw_name(record)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"raw output: {os.path.relpath(path, Path.cwd())}", file=sys.stderr)
    return path
