"""What differs between the trainer's task types, and nothing else.

Research questions and code tasks differ in where tasks come from, which agent graph rolls them
out, which browser that graph searches, the default reward, what counts as correct, and which tools
are worth counting.  Everything else in a step — group advantages, dynamic and void-turn filtering,
the masked loss, KL to the disabled adapter, checkpoints and resume, metrics, plots and alarms — is
the one loop in ``rl.train_rl``: code is "a second task type, not a second trainer".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from research_agent.trajectory import Trajectory

if TYPE_CHECKING:
    from .config import TrainConfig

TASK_TYPES = ("research", "code")
# Config fields left unset take these.  Rewards: F1 + action penalty (seed 003); the seed's code
# shaping (C8; ToRL's is "code_torl").  Code turns hold whole functions and DataFrameBench prompts
# run to ~800 tokens, so code needs far more tokens than the fast research template; the tool-call
# cap of code is CodeAgentConfig's (search + execute; submit is never capped).
TASK_DEFAULTS = {
    "research": {"reward": "f1_penalty", "max_new_tokens": 48, "max_total_tokens": 1024, "max_tool_calls": 3},
    "code": {"reward": "code_shaped", "max_new_tokens": 512, "max_total_tokens": 4096, "max_tool_calls": 4},
}
# the actions whose per-trajectory rates go into metrics.jsonl and the plot's tool panel
TOOLS = {"research": ("search", "open", "find"), "code": ("search", "execute", "submit")}
DEFAULT_CODE_TASKS = "dataframebench:train"


def default_task_file() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "factbook_qa.jsonl"


def load_tasks(cfg: TrainConfig) -> list[Any]:
    """Research: JSONL question records; code: ``CodeTask``s from the same loaders and specs as ``eval code``."""
    if cfg.task_type == "code":
        from research_agent.code.tasks import load_tasks as load_code_tasks

        spec = cfg.tasks or DEFAULT_CODE_TASKS
        try:
            tasks = load_code_tasks(spec)
        except ValueError as e:  # TaskSourceError included: a bad spec or file, said in the user's terms
            raise SystemExit(f"error: {e}") from None
        if not tasks:
            raise SystemExit(f"no code tasks in {spec}")
        return tasks
    from synth.qa import read_jsonl

    path = cfg.tasks or str(default_task_file())
    items = read_jsonl(path, split=cfg.split or None)
    if not items:
        raise SystemExit(f"no tasks with split {cfg.split!r} in {path}")
    return items


def make_browser(cfg: TrainConfig) -> Any:
    """The corpus the rollouts search: research documents, or API docs for multi-tool code (else none).

    The code default is the cached API-docs corpus that ``eval code`` uses too, so a policy is
    evaluated against the documentation it learned to search.
    """
    if cfg.task_type == "code" and cfg.code_mode != "multi-tool":
        return None
    if cfg.retrieval_url:
        from corpus.service import RemoteBrowser

        return RemoteBrowser(cfg.retrieval_url)
    if cfg.task_type == "code":
        from research_agent.code.apidocs import api_docs_browser

        return api_docs_browser(cfg.corpus, cfg.docs_modules or None)
    from corpus import open_corpus

    return open_corpus(cfg.corpus)


def agent_config(cfg: TrainConfig) -> Any:
    """The rollout graph's config from the shared turn, tool-call, token and temperature limits."""
    limits = dict(max_turns=cfg.max_turns, max_tool_calls=cfg.max_tool_calls, max_new_tokens=cfg.max_new_tokens,
                  max_total_tokens=cfg.max_total_tokens, temperature=cfg.temperature)
    if cfg.task_type == "code":
        from research_agent.code.agent import CodeAgentConfig

        return CodeAgentConfig(mode=cfg.code_mode, **limits)
    from research_agent.agent import AgentConfig

    return AgentConfig(template=cfg.template, context=cfg.context, context_tokens=cfg.context_tokens,
                       notes_tokens=cfg.notes_tokens, **limits)


def group_items(task: Any, step: int, cfg: TrainConfig) -> list[dict]:
    """The G rollout items of one task at one step; ids name task, step and sample, so records are traceable."""
    if cfg.task_type == "code":
        return [{"id": f"{task.id}::s{step}g{g}", "task": task} for g in range(cfg.group_size)]
    return [{**task, "id": f"{task.get('id', '')}::s{step}g{g}"} for g in range(cfg.group_size)]


def run_rollouts(items: list[dict], policy: Any, browser: Any, cfg: TrainConfig) -> list[Trajectory]:
    """One batch of trajectories (input order) through the same graph that ``ask`` / eval run."""
    if cfg.task_type == "code":
        from research_agent.code.agent import run_code_batch

        return run_code_batch(items, policy, browser, agent_config(cfg), progress=False,
                              concurrency=cfg.concurrency)
    from research_agent.agent import run_batch

    return run_batch(items, policy, browser, agent_config(cfg), progress=False, concurrency=cfg.concurrency)


def is_correct(traj: Trajectory, cfg: TrainConfig) -> bool:
    """Correct for pass rate and accuracy filtering: the tests passed (code), or F1 ≥ the threshold."""
    if cfg.task_type == "code":
        return bool(traj.gold.get("passed"))
    from rewards.qa import token_f1

    return token_f1(traj.answer, traj.gold.get("answers", [])) >= cfg.pass_threshold
