"""Weights that change over training steps (C5 decay, C10 composition, R1-Searcher's two stages).

A Schedule is a small frozen value: its kind and numbers, so it is printable, comparable and can be
written into a config file or parsed back from one ("linear(0.5,0,500)").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

KINDS = ("constant", "linear", "step", "cosine")
_CALL = re.compile(r"^\s*(\w+)\s*\(([^()]*)\)\s*$")


@dataclass(frozen=True)
class Schedule:
    """value(step) for one of: constant(v), linear(start, end, steps), step(at, before, after),
    cosine(start, end, steps).  linear and cosine hold `end` after `steps`."""

    kind: str
    params: tuple[float, ...]

    def __post_init__(self) -> None:
        arity = {"constant": 1, "linear": 3, "step": 3, "cosine": 3}
        if self.kind not in arity:
            raise ValueError(f"unknown schedule {self.kind!r}; use one of {KINDS}")
        if len(self.params) != arity[self.kind]:
            raise ValueError(f"{self.kind} takes {arity[self.kind]} numbers, got {len(self.params)}")
        if not all(math.isfinite(p) for p in self.params):
            raise ValueError(f"schedule numbers must be finite, got {self.params}")
        if self.kind in ("linear", "cosine") and self.params[2] < 0:
            raise ValueError("schedule length (steps) must be >= 0")

    @classmethod
    def constant(cls, value: float) -> Schedule:
        return cls("constant", (float(value),))

    @classmethod
    def linear(cls, start: float, end: float, steps: int) -> Schedule:
        return cls("linear", (float(start), float(end), float(steps)))

    @classmethod
    def step(cls, at: int, before: float, after: float) -> Schedule:
        """Two stages (R1-Searcher): `before` until step `at`, then `after`."""
        return cls("step", (float(at), float(before), float(after)))

    @classmethod
    def cosine(cls, start: float, end: float, steps: int) -> Schedule:
        return cls("cosine", (float(start), float(end), float(steps)))

    def value(self, step: int | float) -> float:
        step = max(0.0, float(step))
        p = self.params
        if self.kind == "constant":
            return p[0]
        if self.kind == "step":
            return p[1] if step < p[0] else p[2]
        start, end, steps = p
        t = 1.0 if steps == 0 else min(step / steps, 1.0)
        if self.kind == "linear":
            return start + (end - start) * t
        return start + (end - start) * (1 - math.cos(math.pi * t)) / 2

    def __str__(self) -> str:
        return f"{self.kind}({','.join(f'{x:g}' for x in self.params)})"

    @classmethod
    def from_config(cls, config: Any) -> Schedule:
        """From a number, a Schedule, a string "kind(a,b,c)" or "0.3", or {"kind": ..., "params": [...]}."""
        if isinstance(config, Schedule):
            return config
        if isinstance(config, bool):
            raise ValueError(f"not a schedule: {config!r}")
        if isinstance(config, int | float):
            return cls.constant(config)
        if isinstance(config, str):
            m = _CALL.match(config)
            if not m:
                try:
                    return cls.constant(float(config))
                except ValueError:
                    raise ValueError(
                        f"not a schedule: {config!r}; write a number or kind(numbers), e.g. step(100,0,1)"
                    ) from None
            try:
                nums = tuple(float(x) for x in m.group(2).split(",") if x.strip())
            except ValueError:
                raise ValueError(f"schedule {config!r} has a non-numeric argument") from None
            return cls(m.group(1), nums)
        if isinstance(config, dict) and "kind" in config:
            return cls(str(config["kind"]), tuple(float(x) for x in config.get("params", ())))
        raise ValueError(f"not a schedule: {config!r}")

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": list(self.params)}
