"""The code agent: one LangGraph graph for code tasks, for rollouts (task_type="code") and evaluation.

policy → tool (search docs | execute) → policy → ... → submit → end, the same shape as the
research agent (``research_agent.agent``): each node returns a ``Command`` naming the next node, and
the trajectory is one token stream (prompt, model tokens, observation tokens) so what the model saw
is exactly what the trainer masks and trains on.  Parsing and the tools themselves live in
``CodeEnvironment``; this module only adds the loop, the limits and the token bookkeeping.

Tool results come back as a user turn of the model's chat template by default (``observation_format
="chat"``): the untrained instruct models read a result appended to their own turn (the seed's and
Search-R1's inline format, still available) as their own text, and continued it — qwen2.5-coder
scored 0/24 in code-only mode that way, writing prose or a bare fence after every result.

Modes (seed 004's three baselines): ``no-tools`` (one turn: the code block is the submission),
``code-only`` (execute + submit) and ``multi-tool`` (search docs + execute + submit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from research_agent.code.env import MODES, CodeEnvironment, turn_continues
from research_agent.code.sandbox import DEFAULT_LIMITS, TEST_LIMITS, SandboxLimits
from research_agent.code.tasks import CodeTask
from research_agent.policy import Generation
from research_agent.trajectory import Step, Trajectory

OBSERVATION = "\n<result>\n{body}\n</result>\n"
OBSERVATION_FORMATS = ("chat", "inline")
NO_CALLS_LEFT = "You have no tool calls left. Submit your solution now with ```submit."
LAST_TURN = "This is your last turn: submit your solution now with ```submit."
CALLS_LEFT = "({n} tool calls left)"
# Actions that use up the tool budget; submit never does (it must stay possible to end the task).
BUDGETED = ("search", "execute")
# Calls after the first that one turn may take to get past quoted ``` blocks (each re-reads the context).
MAX_CONTINUATIONS = 3


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
            "research_agent.policy.ends_in_loop): small models loop to the token limit, and the turn "
            "is invalid either way"
        },
    )

    continue_quotes: bool = field(
        default=False,
        metadata={
            "help": "continue a turn cut at a bare ``` line that ends no action (a quoted error) until a "
            "tagged block closes (code.env.turn_continues). Off by default: smollm2 after code SFT+RL, "
            "on the 7 test tasks where it quoted errors so, went on with runs of bare fences (submitted 3/7 -> 0/7)"
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

    @property
    def turn_limit(self) -> int:
        """no-tools is single-turn by definition (seed 004's baseline): its one code block is the answer."""
        return 1 if self.mode == "no-tools" else self.max_turns

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CodeState(TypedDict):
    traj: Trajectory
    pending: tuple[str, str] | None  # (action, argument) the policy chose


def _now() -> float:
    return time.perf_counter()


_SENTINELS = ("\x00ASSISTANT-TURN\x00", "\x00TOOL-RESULT\x00")


def chat_observation_frame(tokenizer) -> tuple[str, str] | None:
    """(before, after): the chat-template text that closes the model's turn and opens a user turn,
    and the text that closes that user turn and opens the next assistant turn; None without a
    chat template. Found by rendering sentinels, so it is right for any template (ChatML, Llama...)."""
    cached = getattr(tokenizer, "_research_agent_observation_frame", False)
    if cached is not False:
        return cached
    frame = None
    try:
        msgs = [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": _SENTINELS[0]},
            {"role": "user", "content": _SENTINELS[1]},
        ]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        a, u = text.index(_SENTINELS[0]) + len(_SENTINELS[0]), text.index(_SENTINELS[1])
        if a <= u:
            frame = (text[a:u], text[u + len(_SENTINELS[1]) :])
    except Exception:  # no template, or one that rejects these messages: inline is the fallback
        frame = None
    try:
        tokenizer._research_agent_observation_frame = frame
    except Exception:
        pass
    return frame


def used_calls(traj: Trajectory) -> int:
    """Search and execute calls that actually ran (refused ones do not count)."""
    return sum(1 for s in traj.steps if s.action in BUDGETED and not s.info.get("refused"))


def exceeded_tokens(traj: Trajectory, cfg: CodeAgentConfig) -> bool:
    return len(traj.prompt_ids) + len(traj.token_ids) >= cfg.max_total_tokens - 8


class CodeAgent:
    """Holds the policy, the environment of one task and the compiled graph; ``run`` solves the task."""

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
    ):
        self.policy = policy
        self.tok = policy.tokenizer
        self.config = config or CodeAgentConfig()
        self.task = task
        self.env = CodeEnvironment(task, docs_browser, limits, test_limits, self.config.submit_hint)
        self.on_step = on_step
        self.graph = self._build()

    # ---- the graph ------------------------------------------------------------------------------
    def _build(self):
        g = StateGraph(CodeState)
        g.add_node("policy", self.policy_node)
        g.add_node("tool", self.tool_node)
        g.add_node("submit", self.submit_node)
        g.add_edge(START, "policy")
        return g.compile()

    def policy_node(self, state: CodeState) -> Command[Literal["tool", "submit", "policy", "__end__"]]:
        traj, cfg = state["traj"], self.config
        if len(traj.steps) >= cfg.turn_limit:
            traj.stop_reason = "max_turns"
            return Command(goto=END)
        if exceeded_tokens(traj, cfg):
            traj.stop_reason = "max_tokens"
            return Command(goto=END)
        budget = min(cfg.max_new_tokens, cfg.max_total_tokens - len(traj.prompt_ids) - len(traj.token_ids))
        t0 = _now()
        gen, continued = self._generate_turn(traj, budget)
        action, argument, valid, error = CodeEnvironment.parse(gen.text, cfg.mode)
        from_last_run = action == "submit" and not argument
        if action == "submit":
            argument, error = self.env.resolve_submit(argument)
            if error:
                action, valid = "invalid", False
        step = Step(
            action=action,
            argument=argument,
            completion=gen.text,
            valid=valid,
            error=error,
            completion_ids=list(gen.token_ids),
            completion_logprobs=list(gen.logprobs),
            seconds=_now() - t0,
            info={
                "finish_reason": gen.finish_reason,
                **({"continued": continued} if continued else {}),
                **({"from_last_run": True} if from_last_run else {}),
            },
        )
        traj.steps.append(step)
        traj.token_ids += step.completion_ids
        traj.token_mask += [1] * len(step.completion_ids)
        traj.logprobs += step.completion_logprobs
        if action == "submit":
            return Command(goto="submit", update={"pending": (action, argument)})
        if not valid:
            body, _, _ = self.env.run("invalid", error or "")
            self._observe(traj, step, body, self._note(traj))
            return Command(goto="policy", update={"pending": None})
        return Command(goto="tool", update={"pending": (action, argument)})

    def tool_node(self, state: CodeState) -> Command[Literal["policy"]]:
        traj, (action, argument) = state["traj"], state["pending"]
        step = traj.steps[-1]
        t0 = _now()
        if used_calls(traj) > self.config.max_tool_calls:  # the current step already counts
            step.error = "tool call limit reached"
            step.info["refused"] = True
            body = NO_CALLS_LEFT
        else:
            body, info, _ = self.env.run(action, argument)
            step.info.update(info)
            if action == "execute" and info.get("error"):
                step.error = info["error"]
        step.seconds += _now() - t0
        note = "" if step.info.get("refused") else self._note(traj)
        if step.info.get("note") and note != "":  # the submit hint, when a turn follows
            note = f"{step.info['note']} {note}"
        self._observe(traj, step, body, note)
        return Command(goto="policy", update={"pending": None})

    def submit_node(self, state: CodeState) -> Command[Literal["__end__"]]:
        traj, (_, code) = state["traj"], state["pending"]
        step = traj.steps[-1]
        t0 = _now()
        body, info, _ = self.env.run("submit", code)
        step.info.update(info)
        step.seconds += _now() - t0
        traj.answer = code
        traj.gold["passed"] = bool(info.get("passed"))
        traj.stop_reason = "submit"
        # the test verdict is shown (and masked out), so a multi-episode learner sees why it failed
        self._observe(traj, step, body)
        return Command(goto=END)

    def _generate_turn(self, traj: Trajectory, budget: int) -> tuple[Generation, int]:
        """One policy turn; with ``continue_quotes``, continued past ``` lines that end no action.

        Each continuation is a new call on the turn so far, so its tokens and logprobs are exactly
        what the model produced; the turn's finish reason is the last call's.
        """
        cfg = self.config
        text, ids, lps, reason, continued = "", [], [], "stop", 0
        while True:
            gen = self.policy.generate(
                [traj.prompt_ids + traj.token_ids + ids],
                max_new_tokens=budget - len(ids),
                temperature=cfg.temperature,
                stop=CodeEnvironment.STOP_STRINGS,
                **({"stop_loops": True} if cfg.stop_loops else {}),
            )[0]
            text, ids, lps, reason = text + gen.text, ids + list(gen.token_ids), lps + list(gen.logprobs), gen.finish_reason
            done = not cfg.continue_quotes or reason != "stop" or len(ids) >= budget or not gen.token_ids
            if done or continued == MAX_CONTINUATIONS or not turn_continues(text, cfg.mode):
                return Generation(text, ids, lps, reason), continued
            continued += 1

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _note(self, traj: Trajectory) -> str:
        """What the model must know about its remaining budget (never truncated away)."""
        cfg = self.config
        if cfg.mode == "no-tools" or len(traj.steps) >= cfg.turn_limit:
            return ""  # no turn follows: a budget note would only mislead readers of the record
        if len(traj.steps) == cfg.turn_limit - 1:
            return LAST_TURN
        left = cfg.max_tool_calls - used_calls(traj)
        return NO_CALLS_LEFT if left <= 0 else CALLS_LEFT.format(n=left)

    def _observe(self, traj: Trajectory, step: Step, body: str, note: str = "") -> None:
        """Append an observation; the body is truncated to the token budget, the note never is."""
        ids = self.tok.encode(body, add_special_tokens=False)
        if len(ids) > self.config.observation_tokens:
            body = self.tok.decode(ids[: self.config.observation_tokens]) + " ...(truncated)"
        if note:
            body = f"{body}\n{note}"
        frame = chat_observation_frame(self.tok) if self.config.observation_format == "chat" else None
        text = f"{frame[0]}<result>\n{body}\n</result>{frame[1]}" if frame else OBSERVATION.format(body=body)
        step.observation = text
        step.observation_ids = self.tok.encode(text, add_special_tokens=False)
        traj.token_ids += step.observation_ids
        traj.token_mask += [0] * len(step.observation_ids)
        traj.logprobs += [0.0] * len(step.observation_ids)
        if self.on_step is not None:
            self.on_step(traj, step)

    # ---- entry points ---------------------------------------------------------------------------
    def new_trajectory(self, *, id: str = "") -> Trajectory:
        cfg = self.config
        question = CodeEnvironment.task_message(self.task)
        msgs = [
            {"role": "system", "content": CodeEnvironment.instructions(cfg.mode)},
            {"role": "user", "content": question},
        ]
        prompt_ids = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        prompt_ids = list(prompt_ids)
        if len(prompt_ids) > cfg.max_total_tokens // 2:
            raise ValueError(
                f"task {self.task.id} is too long ({len(prompt_ids)} prompt tokens; "
                f"at most {cfg.max_total_tokens // 2} with max_total_tokens={cfg.max_total_tokens})"
            )
        return Trajectory(
            question=question,
            id=id or self.task.id,
            gold=task_gold(self.task),
            prompt_ids=prompt_ids,
            meta={
                "task_type": "code",
                "mode": cfg.mode,
                "model": getattr(self.policy, "name", ""),
                "config": cfg.to_dict(),
            },
        )

    def run(self, *, id: str = "") -> Trajectory:
        traj = self.new_trajectory(id=id)
        t0 = _now()
        self.graph.invoke({"traj": traj, "pending": None}, {"recursion_limit": 3 * self.config.max_turns + 5})
        traj.meta["seconds"] = _now() - t0
        return traj


def task_gold(task: CodeTask) -> dict[str, Any]:
    """The gold record of a code trajectory; ``passed`` becomes True only when a submission passes."""
    return {"task_id": task.id, "source": task.source, "passed": False}


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
    """Run many code tasks concurrently through one batched policy; results in input order.

    Once ``stop`` is set, tasks not yet started are skipped (left out of the results) while those in
    flight run to the end and reach ``on_result``: a stopped eval keeps everything it started.

    Each item is {"id", "task": CodeTask}.  Concurrent trajectories share ``generate`` calls through
    ``BatchingPolicy``; each gets its own environment and, when the browser can fork, its own docs
    browser.  A task that cannot start (prompt too long) yields a trajectory with stop_reason
    "error" instead of aborting the batch; a sandbox that cannot start at all does abort it, since
    scoring that as a failed solution would poison rewards and pass rates.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm import tqdm

    from research_agent.policy import BatchingPolicy

    config = config or CodeAgentConfig()
    for i, item in enumerate(items):
        if not isinstance(item.get("task"), CodeTask):
            raise TypeError(f"item {i} needs a CodeTask under 'task' (got {type(item.get('task')).__name__})")
    batched = policy if isinstance(policy, BatchingPolicy) else BatchingPolicy(policy, max_batch=concurrency)
    results: list[Trajectory | None] = [None] * len(items)

    def one(i: int) -> Trajectory | None:
        if stop is not None and stop.is_set():
            return None
        item, task = items[i], items[i]["task"]
        tid = str(item.get("id", task.id))
        browser = docs_browser.fork() if hasattr(docs_browser, "fork") else docs_browser
        try:
            return CodeAgent(batched, task, browser, config, limits=limits, test_limits=test_limits).run(
                id=tid
            )
        except ValueError as e:
            return Trajectory(
                question=task.prompt,
                id=tid,
                gold=task_gold(task),
                stop_reason="error",
                meta={"task_type": "code", "mode": config.mode, "error": str(e)},
            )

    bar = tqdm(total=len(items), desc=f"code {config.mode}", disable=not progress, unit="task")
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {pool.submit(one, i): i for i in range(len(items))}
        for fut in as_completed(futures):
            traj = fut.result()
            if traj is None:  # skipped after a stop
                continue
            results[futures[fut]] = traj
            if on_result is not None:
                on_result(traj)
            bar.update(1)
    bar.close()
    return [r for r in results if r is not None]


__all__ = [
    "CodeAgent",
    "CodeAgentConfig",
    "chat_observation_frame",
    "run_code_batch",
    "task_gold",
    "used_calls",
]
