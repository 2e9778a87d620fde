"""Recipe stages that outlive the machine they ran on: each stage's outputs and its card, committed.

A training chain on 2 CPU cores (demonstrations → SFT → RL → evals) is longer than one working
session, and a session may start on a fresh machine, so the recipe's scratch directory does not
survive.  What does survive is the repository, so every stage publishes what later stages need
into an artifact directory (``artifacts/<name>/stages/<stage>/``) beside a card: the exact command,
the code commit, the hashes of its inputs and, for evals and training, its numbers.  The next
session restores a stage whose card matches instead of running it, and resumes a stage published
part-way (a training checkpoint with its optimizer state, an eval's finished answers).

What makes a card match is the stage's *key*: its module, its argv with the scratch directory
written as ``$OUT``, and the content hash of every file or directory the argv names that exists
when it starts (the task file, the SFT data, the adapter an eval loads).  A changed input or
setting changes the key, and the stage runs again instead of being restored.

Stored files keep the repository small: JSON and JSONL over ``COMPRESS_OVER`` bytes are gzipped,
dotfiles (locks) and all but the newest training checkpoint are left out, and a file over
``MAX_FILE_BYTES`` stops the publish with an error rather than being committed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text, content_hash

COMPRESS_OVER = 256 * 1024
MAX_FILE_BYTES = 60 * 1024 * 1024  # the optimizer state a stage needs to resume (the largest file allowed)
CARD = "card.json"
FILES = "files"


class ArtifactError(RuntimeError):
    """An artifact directory cannot be read or written as asked."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def code_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it; "" outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if head and dirty else "")


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def display_argv(argv: list[str], out: Path) -> list[str]:
    """argv with the scratch directory written as ``$OUT`` and the checkout's files relative to it, so
    the same stage in another checkout, or with another scratch directory, has the same key."""
    def shown(a: str) -> str:
        for prefix, name in ((str(out), "$OUT"), (str(out.resolve()), "$OUT"), (str(repo_root()), "")):
            if a == prefix or a.startswith(prefix + os.sep):
                rest = a[len(prefix):].lstrip(os.sep)
                return f"{name}/{rest}" if name and rest else (name or rest or ".")
        return a

    return [shown(a) for a in argv]


def stage_command(module: str, argv: list[str], out: Path) -> str:
    """The command a stage's card shows: what a user types to run the stage alone."""
    shown = module.removesuffix(".__main__").replace("eval.cli", "eval")
    return f"python -m {shown} {shlex.join(display_argv(argv, out))}"


def stage_inputs(argv: list[str], out: Path) -> dict[str, str]:
    """Content hashes of the paths the argv names that exist now, except the stage's own ``--out``."""
    own = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--out"}
    found = {}
    for a in argv:
        if a in own or a.startswith("-") or len(a) > 4096:
            continue
        p = Path(a)
        if p.exists():
            found[display_argv([a], out)[0]] = content_hash(p)
    return found


# trainer flags that change what a stage costs, never what it makes (the trainer lets them differ on
# --resume too): a stage's key leaves them out, so a machine with memory to spare goes on with a
# stage that a laptop published, and restores the laptop's finished ones
COST_ONLY_FLAGS = ("--activation-budget", "--gradient-checkpointing")


def without_cost_flags(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in COST_ONLY_FLAGS:
            skip = True
        elif not a.startswith(tuple(f + "=" for f in COST_ONLY_FLAGS)):
            out.append(a)
    return out


def same_command(a: str, b: str) -> bool:
    """Two stage commands (as cards and markers record them) that make the same thing."""
    return without_cost_flags(shlex.split(a)) == without_cost_flags(shlex.split(b))


def stage_key(module: str, argv: list[str], out: Path, inputs: dict[str, str]) -> str:
    argv = without_cost_flags(argv)
    blob = json.dumps({"module": module, "argv": display_argv(argv, out), "inputs": inputs}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class StageCard:
    stage: str
    key: str
    command: str
    commit: str
    inputs: dict[str, str]
    status: str = "done"  # done | partial (a checkpoint or part of the answers, to resume from)
    seconds: float = 0.0  # time spent in the stage, summed over the sessions that ran it
    sessions: int = 1
    updated: str = ""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # stored name -> {sha256, bytes, gzip}
    numbers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> StageCard:
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as e:
            raise ArtifactError(f"{path} is not a stage card ({e}); delete its stage directory to run the "
                                "stage again") from None


class ArtifactStore:
    """One artifact directory: ``stages/<stage>/{card.json, files/...}``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def stage_dir(self, stage: str) -> Path:
        return self.root / "stages" / stage

    def card(self, stage: str) -> StageCard | None:
        path = self.stage_dir(stage) / CARD
        return StageCard.read(path) if path.exists() else None

    def publish(self, stage: str, out: Path, outputs: list[Path], card: StageCard) -> StageCard:
        """Copy ``outputs`` (files or directories under ``out``) into the stage, then write its card.

        The files go to a temporary directory renamed into place, and the card is written last, so
        a stage directory with a card always holds the files the card lists."""
        final = self.stage_dir(stage)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{stage}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / FILES).mkdir(parents=True)
        stored: dict[str, dict[str, Any]] = {}
        for src in outputs:
            for path in _files_to_store(src, resumable=card.status != "done"):
                rel = path.relative_to(out)
                stored.update(_store_file(path, tmp / FILES / rel, str(rel)))
        card.files = stored
        card.updated = time.strftime("%Y-%m-%d %H:%M:%S")
        atomic_write_text(tmp / CARD, json.dumps(asdict(card), indent=1, ensure_ascii=False) + "\n")
        old = final.parent / f".{stage}.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        return card

    def restore(self, stage: str, out: Path) -> StageCard:
        """Write the stage's stored files back under ``out`` (decompressed), checking each hash."""
        card = self.card(stage)
        if card is None:
            raise ArtifactError(f"{self.stage_dir(stage)} has no {CARD}")
        for rel, meta in card.files.items():
            src = self.stage_dir(stage) / FILES / (rel + (".gz" if meta.get("gzip") else ""))
            if not src.exists():
                raise ArtifactError(f"{src} is listed in the card of stage {stage} but missing")
            data = gzip.decompress(src.read_bytes()) if meta.get("gzip") else src.read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise ArtifactError(f"{src} does not match its card's hash: the artifact is corrupt; delete "
                                    f"{self.stage_dir(stage)} to run the stage again")
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.restoring")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
        return card


def _files_to_store(src: Path, resumable: bool = True) -> list[Path]:
    """A file, or a directory's files less dotfiles and all training checkpoints but the newest.

    A finished training run (``resumable`` False, its ``adapter/`` written) keeps no checkpoint:
    the adapter is what later stages read, and an optimizer state is only for resuming."""
    if src.is_file():
        return [src]
    if not src.is_dir():
        return []
    newest = None
    ckpts = src / "checkpoints"
    if not resumable and (src / "adapter" / "adapter_model.safetensors").exists():
        ckpts = src / "no-checkpoints"
    if ckpts.is_dir():
        steps = [p for p in ckpts.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / "state.json").exists()]
        newest = max(steps, key=lambda p: int(p.name.split("-")[1]), default=None)
    files = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if not p.is_file() or _hidden(rel):
            continue
        if rel.parts[0] == "checkpoints" and (newest is None or not p.is_relative_to(newest)):
            continue
        if rel.parts[0] == "published":  # adapters sent to a generation server: copies of checkpoints
            continue
        files.append(p)
    return files


def _store_file(src: Path, dest: Path, rel: str) -> dict[str, dict[str, Any]]:
    data = src.read_bytes()
    meta: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "gzip": False}
    if src.suffix in (".json", ".jsonl", ".md", ".txt") and len(data) > COMPRESS_OVER:
        data = gzip.compress(data, compresslevel=9, mtime=0)
        dest = dest.with_name(dest.name + ".gz")
        meta["gzip"] = True
    if len(data) > MAX_FILE_BYTES:
        raise ArtifactError(f"{src} is {len(data) / 2**20:.1f} MB stored, over the {MAX_FILE_BYTES / 2**20:.0f} MB "
                            "an artifact file may be: it cannot be committed")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return {rel: meta}


def write_index(store: ArtifactStore) -> Path:
    """``README.md`` of the artifact directory: every stage's status, cost, command and numbers."""
    rows = []
    for d in sorted((store.root / "stages").glob("*/" + CARD), key=lambda p: p.stat().st_mtime):
        c = StageCard.read(d)
        shown = {k: v for k, v in c.numbers.items() if k in INDEX_NUMBERS}
        nums = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())
        rows.append(f"| {c.stage} | {c.status} | {c.seconds / 60:.0f} | {c.commit[:12]} | {nums} | `{c.command}` |")
    text = (f"# {store.root.name}\n\nWritten by `python -m recipe` as its stages finish "
            "(`recipe/artifacts.py`); each stage's `card.json` has its input hashes and every "
            "file's hash. `partial` stages resume from here.\n\n"
            "| stage | status | minutes | commit | numbers | command |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    atomic_write_text(store.root / "README.md", text)
    return store.root / "README.md"


INDEX_NUMBERS = ("questions", "em", "f1", "answer_rate", "citation_precision", "searches_per_q", "step", "loss",
                 "examples", "reward", "pass_rate")
