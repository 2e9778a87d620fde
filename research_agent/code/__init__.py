"""The code agent (features F1-F4): sandbox, task loaders, API docs, tools, and the agent loop.

``sandbox`` runs untrusted code; ``tasks`` loads benchmarks and checks solutions; ``apidocs`` turns
installed libraries into corpus documents for ``search_docs``; ``env`` is the code environment of the
one agent loop (``research_agent.loop``): it parses model turns into the three tools and runs them;
``prompts`` holds every prompt string; ``agent`` has the config and the entry points
(``run_code_batch`` for rollouts and eval).

``CodeAgentConfig`` and ``run_code_batch`` are importable from here; they load lazily so that using
only the sandbox or the task loaders does not import LangGraph.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"CodeAgent", "CodeAgentConfig", "run_code_batch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from research_agent.code import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'research_agent.code' has no attribute {name!r}")
