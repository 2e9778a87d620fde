"""Training metrics into the experiment trackers people already use, beside metrics.jsonl and the plots.

``--report-to none|tensorboard|trackio|wandb``. Each row the trainer writes to ``metrics.jsonl`` is
also logged, numbers only, at its step. Every tracker is used in a mode that needs no account and no
network: TensorBoard event files under ``OUT/tensorboard``, trackio's local store, and wandb in
offline mode (``WANDB_MODE`` set by the user wins, e.g. ``online``). The libraries are optional
extras (``pip install 'research-agent[tensorboard]'`` ...); asking for one that is not installed is
one error before any model loads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

TRACKERS = ("none", "tensorboard", "trackio", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}


class TrackerError(RuntimeError):
    """A tracker was asked for that cannot be used here."""


def check_tracker(name: str) -> None:
    """Fail early (before a model loads) for an unknown tracker or one whose package is missing."""
    if name not in TRACKERS:
        raise TrackerError(f"report_to must be one of {', '.join(TRACKERS)}, not {name!r}")
    if name == "none":
        return
    import importlib.util

    if importlib.util.find_spec(PACKAGES[name]) is None:
        raise TrackerError(f"--report-to {name} needs the {PACKAGES[name]} package: "
                           f"pip install 'research-agent[{name}]' (or pip install {PACKAGES[name]})")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (booleans and strings are not plotted)."""
    out = {}
    for k, v in row.items():
        if k == "step" or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


class Tracker:
    """No tracker: the base the others extend (metrics.jsonl and the plots are always written)."""

    def log(self, row: dict[str, Any], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker(Tracker):
    def __init__(self, out: Path, config: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.dir = out / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in sorted(config.items())), 0)

    def log(self, row: dict[str, Any], step: int) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TrackioTracker(Tracker):
    def __init__(self, out: Path, config: dict[str, Any]):
        import trackio

        self.trackio = trackio
        trackio.init(project=os.environ.get("TRACKIO_PROJECT", "research-agent"), name=out.name, config=config)

    def log(self, row: dict[str, Any], step: int) -> None:
        self.trackio.log(scalars(row), step=step)

    def close(self) -> None:
        self.trackio.finish()


class WandbTracker(Tracker):
    def __init__(self, out: Path, config: dict[str, Any]):
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "research-agent"), name=out.name,
                              dir=str(out), config=config)

    def log(self, row: dict[str, Any], step: int) -> None:
        self.run.log(scalars(row), step=step)

    def close(self) -> None:
        self.run.finish()


def make_tracker(name: str, out: str | Path, config: dict[str, Any]) -> Tracker:
    check_tracker(name)
    kinds = {"none": None, "tensorboard": TensorBoardTracker, "trackio": TrackioTracker, "wandb": WandbTracker}
    kind = kinds[name]
    return Tracker() if kind is None else kind(Path(out), config)
