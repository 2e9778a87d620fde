"""Checkpoints written atomically, resumed exactly (E7).

A checkpoint directory holds the LoRA adapter, the optimizer, RNG states and the trainer state
(step, data position, reward-schedule/RLER state).  It is written to a temp directory and renamed
into place, so a kill mid-save leaves the previous checkpoint intact; resuming loses at most the
step in progress.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from corpus.files import atomic_write_text
from research_agent.inference.adapters import write_adapter


class ResumeError(RuntimeError):
    """The run directory cannot be resumed as asked."""


def checkpoints(out: str | Path) -> list[Path]:
    root = Path(out) / "checkpoints"
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / "state.json").exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def save_checkpoint(out: str | Path, step: int, model, optimizer, state: dict, keep: int = 3) -> Path:
    root = Path(out) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write_adapter(model, tmp)  # with its chain: a checkpoint loads on its own too (eval checkpoints)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
               tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step}))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model, optimizer) -> dict:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    return json.loads((path / "state.json").read_text())


def check_resume_config(out: str | Path, config) -> None:
    saved = Path(out) / "config.json"
    if not saved.exists():
        raise ResumeError(f"{out} has no config.json: nothing to resume (drop --resume to start a new run)")
    changed = config.diff(json.loads(saved.read_text()))
    if changed:
        raise ResumeError(
            f"the config differs from the run being resumed in: {', '.join(changed)}. "
            "Resume with the same settings, or start a new run in another --out directory."
        )


def prepare_run(config, resume: bool, write: bool = True) -> Path:
    """Create the run directory, record (or, on resume, check) the config, and seed the RNGs.

    ``write=False`` (ranks other than 0 of a data-parallel run) only checks and seeds: one process
    owns the run directory."""
    out = Path(config.out)
    if write:
        out.mkdir(parents=True, exist_ok=True)
    if resume:
        check_resume_config(out, config)
    elif write:
        write_config(out, config)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    return out


def write_config(out: str | Path, config) -> None:
    atomic_write_text(Path(out) / "config.json", json.dumps(config.to_dict(), indent=1))
