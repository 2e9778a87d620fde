"""Checkpoints written atomically, resumed exactly (E7).

A checkpoint directory holds the LoRA adapter, the optimizer, RNG states and the trainer state
(step, data position, reward-schedule/RLER state).  It is written to a temp directory and renamed
into place, so a kill mid-save leaves the previous checkpoint intact.  A stop (Ctrl-C, SIGTERM,
the recipe's ``--stop-after``) between periodic checkpoints saves the last finished step
(``FinishedStep``), so resuming loses only the step in progress, not every step since the last
periodic checkpoint.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
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


def optimizer_steps(optimizer) -> list[float]:
    """Each parameter's update count: unchanged since a step ended means no weight moved since
    (AdamW counts a parameter's update before applying it, so a half-applied update shows)."""
    return [float(s["step"]) for s in optimizer.state.values() if "step" in s]


@contextmanager
def signals_held():
    """Ctrl-C and SIGTERM wait until the block ends: the end of a step (the weights moved, the
    metrics row written, ``FinishedStep`` taken) happens whole, so a stop never falls between the
    update and the record of it.  The handlers are swapped, not the signal mask: a signal may reach
    any thread, and Python runs its handler in the main thread whichever did.  Python installs
    handlers only from the main thread; elsewhere this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:  # now, as it would have been handled then
            s, handler = caught[0], previous[caught[0]]
            if callable(handler):
                handler(s, None)
            elif handler != signal.SIG_IGN:  # the default action (SIGTERM: the process ends)
                os.kill(os.getpid(), s)


class FinishedStep:
    """The trainer state as the last step ended, kept so that a stop in the middle of the next step
    can still checkpoint the finished one: the weights stay those of the finished step until the
    optimizer moves them, but the data position, the curriculum and a stateful reward move as soon
    as the next step draws and scores, so they are copied here when a step ends."""

    def __init__(self, step: int, optimizer, state: dict | None = None):
        self.step, self.state = step, copy.deepcopy(state or {})
        self.updates = optimizer_steps(optimizer)

    def save_on_stop(self, out: str | Path, model, optimizer, keep: int) -> Path | None:
        """Checkpoint this step after a stop, unless a periodic checkpoint has it already or the
        weights moved past it (a stop inside the optimizer step); says which on stderr."""
        have = checkpoints(out)
        if self.step == 0 or (have and int(have[-1].name.split("-")[1]) >= self.step):
            return None
        if optimizer_steps(optimizer) != self.updates:
            print(f"stopped while the weights were being updated; resuming starts from "
                  f"{have[-1] if have else 'the beginning'}", file=sys.stderr)
            return None
        path = save_checkpoint(out, self.step, model, optimizer, self.state, keep=keep)
        print(f"stopped in step {self.step + 1}: saved {path} (resume goes on from step {self.step})",
              file=sys.stderr)
        return path


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
