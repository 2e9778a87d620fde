"""Which task to roll out next: in data order, or by how learnable each kind of task is right now.

A group teaches the policy something only when its samples disagree: all right or all wrong gives
zero advantage, and the dynamic filters (E4) drop groups outside [filter_low, filter_high] anyway.
Drawn in data order, a 135M student on the Factbook set spends most of its rollouts on kinds it
always gets wrong (two-hop questions) or always right (capitals), and the filters throw those groups
away.  The learnability curriculum keeps, per task kind (the ``kind`` field by default), a running
estimate of the chance that a group of that kind is *learnable* — its pass rate strictly between 0
and 1 and inside the filter bounds — and draws kinds in proportion to it.  The estimate decays every
update, so a kind that was hopeless is tried again as the policy improves, and a floor keeps every
kind in the mix; a kind not yet seen starts at the prior, so each is tried early.

The state (per-kind estimates, per-kind read positions) is plain JSON saved in the checkpoint, and
every draw comes from a generator seeded by (seed, step, round), so a resumed run and every rank of a
data-parallel run draw the same tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

__all__ = ["CURRICULA", "LearnabilityCurriculum", "OrderedDraw", "make_curriculum", "task_kind"]

CURRICULA = ("none", "learnability")
NO_KIND = "(none)"


def task_kind(task: Any, key: str) -> str:
    """The kind of a task: a research item's field, or a code task's attribute or ``meta`` entry."""
    if isinstance(task, dict):
        value = task.get(key)
    else:
        value = getattr(task, key, None)
        if value is None:
            value = (getattr(task, "meta", None) or {}).get(key)
    return NO_KIND if value is None or value == "" else str(value)


class OrderedDraw:
    """The data order: one seeded shuffle, read front to back and wrapped (no curriculum)."""

    def __init__(self, n: int, seed: int):
        self.order = list(range(n))
        random.Random(seed).shuffle(self.order)
        self.position = 0

    def draw(self, step: int, round_: int, count: int) -> list[int]:
        out = [self.order[(self.position + i) % len(self.order)] for i in range(count)]
        self.position += count
        return out

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        """Data order does not depend on what the rollouts scored."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = int(state.get("position", 0))


class LearnabilityCurriculum:
    """Kinds drawn in proportion to the estimated chance that a group of that kind is learnable.

    ``decay`` weighs the evidence: after each update every kind's counts are multiplied by it, so
    the estimate follows the last few steps; ``prior`` (with one pseudo-group) is what a kind with
    no evidence is assumed to be; ``floor`` is the least weight a kind keeps.
    """

    def __init__(self, kinds: Sequence[str], seed: int, low: float = 0.2, high: float = 0.8,
                 decay: float = 0.7, prior: float = 0.5, floor: float = 0.05):
        if not kinds:
            raise ValueError("the curriculum needs at least one task")
        if not 0 < decay <= 1:
            raise ValueError(f"curriculum decay must be in (0, 1], not {decay}")
        if not 0 <= floor <= 1:
            raise ValueError(f"curriculum floor must be in [0, 1], not {floor}")
        self.kinds = list(kinds)
        self.seed = seed
        self.low, self.high = low, high
        self.decay, self.prior, self.floor = decay, prior, floor
        self.members: dict[str, list[int]] = {}
        for i, k in enumerate(self.kinds):
            self.members.setdefault(k, []).append(i)
        for k, idx in self.members.items():  # each kind read in its own seeded order
            random.Random(f"{seed}:{k}").shuffle(idx)
        self.positions = {k: 0 for k in self.members}
        self.learnable = {k: 0.0 for k in self.members}
        self.seen = {k: 0.0 for k in self.members}

    # ---- the estimate -------------------------------------------------------------------------
    def is_learnable(self, pass_rate: float) -> bool:
        """A group gives signal: not all right, not all wrong, and inside the filters' bounds
        (a bound at or past its end, ``low <= 0`` or ``high >= 1``, is off, as in the filters)."""
        if not 0.0 < pass_rate < 1.0:
            return False
        if self.low > 0 and pass_rate < self.low:
            return False
        return not (self.high < 1 and pass_rate > self.high)

    def learnability(self, kind: str) -> float:
        return (self.learnable[kind] + self.prior) / (self.seen[kind] + 1.0)

    def weights(self) -> dict[str, float]:
        """The probability of drawing each kind next."""
        raw = {k: max(self.learnability(k), self.floor) for k in self.members}
        total = sum(raw.values())
        if total <= 0:  # floor 0 and nothing learnable anywhere: draw uniformly
            return {k: 1.0 / len(raw) for k in raw}
        return {k: v / total for k, v in raw.items()}

    # ---- drawing and learning -----------------------------------------------------------------
    def draw(self, step: int, round_: int, count: int) -> list[int]:
        rng = random.Random(self.seed * 1_000_003 + step * 1_009 + round_)
        weights = self.weights()
        names = sorted(weights)
        out = []
        for _ in range(count):
            kind = rng.choices(names, weights=[weights[n] for n in names])[0]
            members = self.members[kind]
            out.append(members[self.positions[kind] % len(members)])
            self.positions[kind] += 1
        return out

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        """One round's evidence: the task index and pass rate of every group rolled out."""
        for k in self.members:
            self.learnable[k] *= self.decay
            self.seen[k] *= self.decay
        for i, rate in zip(indices, pass_rates, strict=True):
            kind = self.kinds[i]
            self.seen[kind] += 1.0
            self.learnable[kind] += float(self.is_learnable(rate))

    def metrics(self) -> dict[str, float]:
        """Each kind's draw probability, logged with the step (``curriculum/<kind>``)."""
        return {f"curriculum/{k}": round(v, 4) for k, v in self.weights().items()}

    def state_dict(self) -> dict:
        return {"positions": dict(self.positions), "learnable": dict(self.learnable), "seen": dict(self.seen)}

    def load_state_dict(self, state: dict) -> None:
        for name in ("positions", "learnable", "seen"):
            saved = state.get(name) or {}
            target = getattr(self, name)
            for k in target:
                if k in saved:
                    target[k] = type(target[k])(saved[k])


def make_curriculum(name: str, items: Sequence[Any], cfg: Any) -> OrderedDraw | LearnabilityCurriculum:
    """The task sampler ``cfg.curriculum.name`` names, over ``items``."""
    if name == "none":
        return OrderedDraw(len(items), cfg.seed)
    if name == "learnability":
        kinds = [task_kind(t, cfg.curriculum.key) for t in items]
        return LearnabilityCurriculum(kinds, cfg.seed, low=cfg.filters.low, high=cfg.filters.high,
                                      decay=cfg.curriculum.decay, floor=cfg.curriculum.floor)
    raise ValueError(f"curriculum must be one of {', '.join(CURRICULA)}, not {name!r}")
