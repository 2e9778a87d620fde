"""The code agent: its config, and the entry points that run code tasks through the agent loop.

policy → tool (search docs | execute) → policy → ... → submit → end: the same loop as the research
agent (``research_agent.loop``), driving a ``CodeEnvironment`` (``code/env.py``: parsing, the tools,
what the model is told).  The trajectory is one token stream (prompt, model tokens, observation
tokens), so what the model saw is exactly what the trainer masks and trains on.

Tool results come back as a user turn of the model's chat template by default (``observation_format
="chat"``): the untrained instruct models read a result appended to their own turn (the seed's and
Search-R1's inline format, still available) as their own text, and continued it — qwen2.5-coder
scored 0/24 in code-only mode that way, writing prose or a bare fence after every result.

Modes (seed 004's three baselines): ``no-tools`` (one turn: the code block is the submission),
``code-only`` (execute + submit) and ``multi-tool`` (search docs + execute + submit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from research_agent.code.env import MODES, CodeEnvironment, chat_observation_frame, task_gold, used_calls
from research_agent.code.sandbox import DEFAULT_LIMITS, TEST_LIMITS, SandboxLimits
from research_agent.code.tasks import CodeTask
from research_agent.configs import build, flat_dict, section
from research_agent.loop import run_episode, run_episodes
from research_agent.trajectory import Step, Trajectory

OBSERVATION_FORMATS = ("chat", "inline")


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class SubmissionSettings:
    """What a submission means and what the model is told around it (docs/code-agent.md, test feedback)."""

    submit_hint: bool = _f(True, "after a clean run that defines the entry point, the result says to submit if done")
    stub_submits_last_run: bool = _f(True, "a ```submit block whose entry point has no body submits the code that "
                                     "last ran, as an empty block does")
    flag_repeats: bool = _f(True, "with test feedback, a submission or run of a failed submission's code is told so")
    recall_passing_run: bool = _f(True, "with feedback from a task's examples, a failed submission is answered with "
                                  "the latest earlier run that passes them")
    submit_last_run_at_limit: bool = _f(True, "an episode out of turns is scored on the code that last ran "
                                        "(SWE-agent's autosubmit), where no later submission was tested")


@dataclass
class RedrawSettings:
    """Turns that repeat failed code, drawn again (docs/code-agent.md, repeats drawn again)."""

    repeats: int = _f(4, "with test feedback, draws of a turn that runs or submits a failed submission's code "
                      "before it is taken (0: off, as in RL rollouts)")
    failed_runs: bool = _f(True, "also draw again a rerun of code that raised")
    temperature: float = _f(1.0, "the temperature a repeated turn is drawn again at")
    seed: int = _f(0, "seed of the redrawn turns (with the task id, the turn and the draw)")


@dataclass
class CodeAgentConfig:
    mode: str = _f("multi-tool", "no-tools | code-only | multi-tool (seed 004)")
    max_turns: int = _f(5, "policy turns before the run stops unsubmitted (seed: 5)")
    max_tool_calls: int = _f(4, "search + execute calls allowed; submit is never capped")
    max_new_tokens: int = _f(512, "tokens per policy turn")
    max_total_tokens: int = _f(4096, "cap on prompt + trajectory tokens")
    temperature: float = _f(0.0, "0 = greedy (pass@1 eval); 0.7 for rollouts (seed)")
    observation_tokens: int = _f(400, "observations are truncated to this many tokens")
    observation_format: str = _f("chat", "chat (a tool result is a user turn of the chat template) or inline "
                                 "(appended to the model's own turn, seed 004)")
    stop_loops: bool = _f(True, "end a turn once it ends in a loop (one block of tokens repeated 4+ times)")
    test_feedback: bool = _f(True, "a failed submission is answered with the failing tests and the episode goes on "
                             "(the seed's run-tests tool); false: a submission ends the task")
    submission: SubmissionSettings = section(SubmissionSettings, help="what a submission means and what is said "
                                             "around it")
    redraw: RedrawSettings = section(RedrawSettings, prefix="redraw_", help="turns that repeat failed code, drawn "
                                     "again")

    def __post_init__(self) -> None:
        for name, kind in (("submission", SubmissionSettings), ("redraw", RedrawSettings)):
            if isinstance(getattr(self, name), dict):  # CodeAgentConfig(redraw={"repeats": 0}), a nested record
                setattr(self, name, build(kind, getattr(self, name)))
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"unknown observation_format {self.observation_format!r}; use {' or '.join(OBSERVATION_FORMATS)}"
            )
        if self.max_turns < 1 or self.max_new_tokens < 1 or self.observation_tokens < 1:
            raise ValueError("max_turns, max_new_tokens and observation_tokens must be at least 1")
        if self.redraw.repeats < 0 or self.redraw.temperature <= 0:
            raise ValueError("redraw_repeats must be at least 0 and redraw_temperature above 0")

    @property
    def turn_limit(self) -> int:
        """no-tools is single-turn by definition (seed 004's baseline): its one code block is the answer."""
        return 1 if self.mode == "no-tools" else self.max_turns

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its flat name, as run.json, config.json and trajectories have always recorded it."""
        return flat_dict(self)


class CodeAgent:
    """A policy, one task's environment and a config; ``run`` solves the task through the agent loop."""

    def __init__(
        self,
        policy,
        task: CodeTask,
        docs_browser: Any = None,
        config: CodeAgentConfig | None = None,
        *,
        limits: SandboxLimits = DEFAULT_LIMITS,
        test_limits: SandboxLimits = TEST_LIMITS,
        on_step: Callable[[Trajectory, Step], None] | None = None,
        id: str = "",
    ):
        self.policy = policy
        self.config = config or CodeAgentConfig()
        self.task = task
        self.env = CodeEnvironment(task, docs_browser, limits, test_limits, config=self.config,
                                   tokenizer=policy.tokenizer, model=getattr(policy, "name", ""), id=id)
        self.on_step = on_step

    def new_trajectory(self) -> Trajectory:
        return self.env.new_trajectory()

    def run(self, *, id: str = "") -> Trajectory:
        if id:
            self.env.id = id
        return run_episode(self.policy, self.env, on_step=self.on_step)


def run_code_batch(
    items: list[dict],
    policy,
    docs_browser: Any = None,
    config: CodeAgentConfig | None = None,
    *,
    progress: bool = True,
    on_result: Callable[[Trajectory], None] | None = None,
    concurrency: int = 8,
    limits: SandboxLimits = DEFAULT_LIMITS,
    test_limits: SandboxLimits = TEST_LIMITS,
    stop: threading.Event | None = None,
) -> list[Trajectory]:
    """Run many code tasks concurrently through one batched policy (``loop.run_episodes``).

    Each item is {"id", "task": CodeTask}; each task gets its own environment and, when the browser
    can fork, its own docs browser.  A task that cannot start (prompt too long) yields a trajectory
    with stop_reason "error"; a sandbox that cannot start at all aborts the batch, since scoring
    that as a failed solution would poison rewards and pass rates.  Once ``stop`` is set, tasks not
    yet started are skipped while those in flight run to the end.
    """
    config = config or CodeAgentConfig()
    for i, item in enumerate(items):
        if not isinstance(item.get("task"), CodeTask):
            raise TypeError(f"item {i} needs a CodeTask under 'task' (got {type(item.get('task')).__name__})")
    tok, name = policy.tokenizer, getattr(policy, "name", "")

    def make_env(item: dict, i: int) -> CodeEnvironment:
        task = item["task"]
        browser = docs_browser.fork() if hasattr(docs_browser, "fork") else docs_browser
        return CodeEnvironment(task, browser, limits, test_limits, config=config, tokenizer=tok, model=name,
                               id=str(item.get("id", task.id)))

    return run_episodes(items, policy, make_env, progress=progress, on_result=on_result, concurrency=concurrency,
                        stop=stop, desc=f"code {config.mode}", unit="task")


__all__ = [
    "CodeAgent",
    "CodeAgentConfig",
    "RedrawSettings",
    "SubmissionSettings",
    "chat_observation_frame",
    "run_code_batch",
    "task_gold",
    "used_calls",
]
