"""Fixtures of the code-agent tests: the tasks they run, loaded once per session.

The API-docs corpus (``json_docs``) and the fast model (``smol``) come from tests/conftest.py.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def humaneval_two():
    """The first two HumanEval problems."""
    from research_agent.code.tasks import load_tasks

    return load_tasks("humaneval", limit=2)


@pytest.fixture(scope="session")
def dataframebench_two():
    """The first two DataFrameBench test tasks (DFB/B0001 heatmap, DFB/B0002 scores)."""
    from research_agent.code.tasks import load_tasks

    return load_tasks("dataframebench:test", limit=2)


@pytest.fixture(scope="session")
def humaneval_all():
    """All 164 HumanEval problems, with their visible tests."""
    from research_agent.code.tasks import load_tasks

    return load_tasks("humaneval")
