"""Trained agents that ship with the checkout: ``ask --agent NAME`` / ``eval qa --agent NAME``.

A shipped agent is a directory ``artifacts/NAME/`` holding ``agent.json`` (the base model, the
adapter's relative path, the agent settings it was trained and evaluated with, and its held-out
numbers) and the LoRA adapter itself.  The recipe's ``ship`` stage writes it
(``recipe.ship``); nothing here trains or downloads anything, so a fresh clone answers
with a shipped agent at once.  ``$RESEARCH_AGENT_ARTIFACTS`` points at another artifacts directory
(e.g. for an installed, non-editable package, whose site-packages holds no ``artifacts/``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARTIFACTS_ENV = "RESEARCH_AGENT_ARTIFACTS"
AGENT_FILE = "agent.json"


class UnknownAgent(ValueError):
    """No shipped agent of that name, or its directory is incomplete."""


def artifacts_root() -> Path:
    """``$RESEARCH_AGENT_ARTIFACTS``, else the checkout's ``artifacts/``."""
    return Path(os.environ.get(ARTIFACTS_ENV) or Path(__file__).resolve().parents[1] / "artifacts")


@dataclass
class ShippedAgent:
    name: str
    model: str
    adapter: Path
    settings: dict[str, Any] = field(default_factory=dict)  # AgentConfig fields
    retriever: str = "hybrid"
    numbers: dict[str, Any] = field(default_factory=dict)


def shipped_agents() -> list[str]:
    root = artifacts_root()
    return sorted(p.parent.name for p in root.glob(f"*/{AGENT_FILE}")) if root.is_dir() else []


def load_agent(name: str) -> ShippedAgent:
    """The agent ``name`` (a name under the artifacts directory, or a path to an agent directory)."""
    path = Path(name) if (Path(name) / AGENT_FILE).exists() else artifacts_root() / name
    meta = path / AGENT_FILE
    if not meta.exists():
        known = ", ".join(shipped_agents()) or "none"
        raise UnknownAgent(f"no shipped agent {name!r} in {artifacts_root()} (shipped: {known}); set "
                           f"{ARTIFACTS_ENV} to the checkout's artifacts/ directory if this is an installed package")
    try:
        data = json.loads(meta.read_text())
        agent = ShippedAgent(name=data.get("name", path.name), model=data["model"], adapter=path / data["adapter"],
                             settings=dict(data.get("settings", {})), retriever=data.get("retriever", "hybrid"),
                             numbers=dict(data.get("numbers", {})))
    except (ValueError, KeyError, TypeError) as e:
        raise UnknownAgent(f"{meta} is not a shipped agent's description ({e})") from None
    if not (agent.adapter / "adapter_model.safetensors").exists():
        raise UnknownAgent(f"shipped agent {name!r}: its adapter {agent.adapter} is missing")
    return agent


def apply_agent(args) -> dict[str, Any]:
    """``--agent NAME`` on a parsed command line: its model and adapter, and its settings as defaults.

    An agent is a model, an adapter and the budgets it was trained under, so naming one with a
    different ``--model`` or ``--adapter`` is an error rather than a silent mix; ``--set`` and the
    agent flags still override its settings (returned, to be the config's defaults)."""
    name = getattr(args, "agent", None)
    if not name:
        return {}
    agent = load_agent(name)
    if getattr(args, "adapter", None):
        raise UnknownAgent(f"--agent {name} brings its own adapter; drop --adapter")
    if getattr(args, "model", None) not in (None, agent.model):
        raise UnknownAgent(f"--agent {name} runs on {agent.model}, not {args.model}; drop --model")
    args.model, args.adapter = agent.model, str(agent.adapter)
    return dict(agent.settings)
