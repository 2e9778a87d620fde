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
from dataclasses import asdict, dataclass, field
from typing import Any

from research_agent.code.env import MODES, CodeEnvironment, chat_observation_frame, task_gold, used_calls
from research_agent.code.sandbox import DEFAULT_LIMITS, TEST_LIMITS, SandboxLimits
from research_agent.code.tasks import CodeTask
from research_agent.loop import run_episode, run_episodes
from research_agent.trajectory import Step, Trajectory

OBSERVATION_FORMATS = ("chat", "inline")


@dataclass
class CodeAgentConfig:
    mode: str = field(default="multi-tool", metadata={"help": "no-tools | code-only | multi-tool (seed 004)"})
    max_turns: int = field(
        default=5, metadata={"help": "policy turns before the run stops unsubmitted (seed: 5)"}
    )
    max_tool_calls: int = field(
        default=4, metadata={"help": "search + execute calls allowed; submit is never capped"}
    )
    max_new_tokens: int = field(default=512, metadata={"help": "tokens per policy turn"})
    max_total_tokens: int = field(default=4096, metadata={"help": "cap on prompt + trajectory tokens"})
    temperature: float = field(
        default=0.0, metadata={"help": "0 = greedy (pass@1 eval); 0.7 for rollouts (seed)"}
    )
    observation_tokens: int = field(
        default=400, metadata={"help": "observations are truncated to this many tokens"}
    )
    observation_format: str = field(
        default="chat",
        metadata={
            "help": "chat: a tool result comes back as a user turn of the model's chat template, then a "
            "new assistant turn opens (instruct models answer results there); inline: appended to the "
            "model's own turn (seed 004, Search-R1), which untrained instruct models read as their own "
            "text and continue"
        },
    )

    submit_hint: bool = field(
        default=True,
        metadata={
            "help": "after a clean run that defines the entry point, the result says to submit if done "
            "(untrained models otherwise rerun working code until the budget is gone)"
        },
    )

    stop_loops: bool = field(
        default=True,
        metadata={
            "help": "end a turn once it ends in a loop (one block of tokens repeated 4+ times; "
            "research_agent.inference.policy.ends_in_loop): small models loop to the token limit, and the "
            "turn is invalid either way"
        },
    )

    test_feedback: bool = field(
        default=True,
        metadata={
            "help": "the seed's run-tests tool: a failed submission is answered with the failing tests "
            "(names and each one's last line) and 'fix your code and submit again', the episode goes on "
            "while turns remain, and the last submission is scored. Where a task's tests are its score and "
            "hidden (HumanEval), the verdict comes from the prompt's own examples (code.examples). The default, as "
            "in the seed. false: a submission ends the task, pass or fail (results made before it was the default; "
            "docs/results.md labels each row with its setting)"
        },
    )

    stub_submits_last_run: bool = field(
        default=True,
        metadata={
            "help": "a ```submit block whose entry point has no body (its signature and docstring only) "
            "submits the code that last ran and defined it, as an empty block does. qwen2.5-coder-0.5b, "
            "asked to submit code it had just run, wrote its signature and docstring again and closed the "
            "block: 8 of 13 failed submissions on HumanEval code-only with feedback. false: the stub is "
            "tested as written (results made before this option)"
        },
    )

    flag_repeats: bool = field(
        default=True,
        metadata={
            "help": "with test feedback, a submission or a run of the same code as a failed submission "
            "is told so, with that submission's first failure, in place of the submit hint (greedy "
            "models resubmit failing code unchanged). false: results made before this option"
        },
    )

    recall_passing_run: bool = field(
        default=True,
        metadata={
            "help": "with test feedback from a task's examples (HumanEval), a submission that fails them "
            "is answered with the latest earlier run whose code passes them ('the code of your run N "
            "passes these examples'), and an empty ```submit block then submits that code. "
            "qwen2.5-coder-0.5b ran correct code and then submitted another body (`return False`) in 3 "
            "of 77 re-run HumanEval tasks. false: results made before this option"
        },
    )

    submit_last_run_at_limit: bool = field(
        default=True,
        metadata={
            "help": "an episode that runs out of turns is scored on the code that last ran and defined the "
            "entry point when no submission was tested, or when that run came after the last failed "
            "submission and differs from every failed one (SWE-agent's autosubmit); the "
            "trajectory's meta says autosubmitted, and the submit rate and the shaped reward's "
            "no-submission penalty still count the model's own submissions. qwen2.5-coder-0.5b ran code "
            "five times without submitting in 10 of 164 HumanEval tasks. false: results made before this "
            "option"
        },
    )

    redraw_repeats: int = field(
        default=4,
        metadata={
            "help": "with test feedback, a turn that runs or submits the same code as a failed submission "
            "is drawn again, at redraw_temperature, up to this many times before it is taken (and then "
            "flagged as a repeat). Greedy decoding repeats itself: qwen2.5-coder-0.5b, told its submission "
            "failed, ran or submitted the same code again in 44 of 53 HumanEval tasks, and no failed "
            "submission was fixed; 2 draws at 0.7 still repeated in 60 of 81 turns (docs/results.md). The "
            "redrawn turn is a sample, seeded by redraw_seed, the task and the turn, so a re-run draws the "
            "same turns. Off in RL rollouts (a repeat there must cost reward, not be hidden). 0: results "
            "made before this option"
        },
    )

    redraw_failed_runs: bool = field(
        default=True,
        metadata={
            "help": "with test feedback and redraw_repeats, a run of the same code as an earlier run that "
            "raised is drawn again too: the sandbox answers it with the same error. qwen2.5-coder-0.5b "
            "reran code that had raised 65 times in 26 of 100 DataFrameBench tasks (multi-tool, feedback), "
            "25 of which failed. false: results made before this option"
        },
    )

    redraw_temperature: float = field(
        default=1.0, metadata={"help": "the temperature a repeated turn is drawn again at (redraw_repeats)"}
    )

    redraw_seed: int = field(
        default=0,
        metadata={
            "help": "seed of the redrawn turns (redraw_repeats): each draw is seeded by it, the task id, the "
            "turn and the draw, so the same run draws the same turns whatever ran beside it; another seed "
            "gives another sample of the same run (results before 2026-12-05 drew unseeded)"
        },
    )

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"unknown observation_format {self.observation_format!r}; use {' or '.join(OBSERVATION_FORMATS)}"
            )
        if self.max_turns < 1 or self.max_new_tokens < 1 or self.observation_tokens < 1:
            raise ValueError("max_turns, max_new_tokens and observation_tokens must be at least 1")
        if self.redraw_repeats < 0 or self.redraw_temperature <= 0:
            raise ValueError("redraw_repeats must be at least 0 and redraw_temperature above 0")

    @property
    def turn_limit(self) -> int:
        """no-tools is single-turn by definition (seed 004's baseline): its one code block is the answer."""
        return 1 if self.mode == "no-tools" else self.max_turns

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    "chat_observation_frame",
    "run_code_batch",
    "task_gold",
    "used_calls",
]
