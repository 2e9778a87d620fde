"""The agent loop: one LangGraph graph, compiled once, that drives any ``Environment``.

policy → (tool → policy)* → final → end.  The policy node generates one turn, the environment
parses it into a step (and may have it drawn again before it is taken); a tool step runs in the
tool node and its observation goes back into the stream; an invalid step is told why; a final step
(the research agent's answer, the code agent's submission) ends the episode in the final node.
Each node returns a ``Command`` naming the next node, so the possible transitions are in the type.

What differs between research and code lives in the environment: the opening messages, how a turn
parses into an action, what running an action returns, what ends the episode.  What is the same
lives here once: the turn and token limits, the generation call, observation truncation, the token stream and its mask (written
only by ``Trajectory.append_turn`` / ``append_observation``), the recursion limit, and the batch
runner that pushes many episodes through one ``BatchingPolicy``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Literal, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from corpus import openmp

from .inference.policy import BatchingPolicy, Generation
from .trajectory import Step, Trajectory

Observation = tuple[str, str]  # (body, note): the body is truncated to the token budget, the note never is


class Environment(Protocol):
    """One episode's world: what the model is told, what its turns mean, what its actions return.

    ``config`` carries the limits the loop applies: ``max_turns``, ``max_new_tokens``,
    ``max_total_tokens``, ``temperature``, ``observation_tokens``.
    """

    config: Any
    tokenizer: Any
    stop_strings: list[str]
    stop_loops: bool  # end a turn once it loops (``policy.ends_in_loop``)
    managed: bool  # each step's prompt is rebuilt (managed context) rather than the whole stream
    turn_limit: int  # policy turns before the episode stops unfinished
    window: int  # tokens a turn's prompt and completion may hold together

    def new_trajectory(self) -> Trajectory:
        """The opening messages as a prompt; raises ValueError when the episode cannot start."""

    def failed_trajectory(self, error: str) -> Trajectory:
        """The record of an episode that could not start (stop_reason "error")."""

    def prompt(self, traj: Trajectory) -> list[int]:
        """What the model sees for its next turn."""

    def parse(self, traj: Trajectory, gen: Generation, prompt: list[int], seconds: float) -> tuple[Step, Any]:
        """The turn as a step, and the action the tool or final node will carry out."""

    def is_final(self, step: Step) -> bool:
        """Does this step end the episode (answer, submission)?"""

    def invalid(self, traj: Trajectory, step: Step, action: Any) -> Observation:
        """What the model is told about a turn that parsed as no valid action."""

    def act(self, traj: Trajectory, step: Step, action: Any) -> Observation:
        """Run a tool action."""

    def finish(self, traj: Trajectory, step: Step, action: Any) -> Observation | None:
        """Carry out the final action; an observation (e.g. the test verdict) or None."""

    def done(self, traj: Trajectory) -> bool:
        """After a tool action: has the episode ended (e.g. a submission with test feedback passed)?"""

    def redraw(self, traj: Trajectory, step: Step, draws: int) -> tuple[float, int | None] | None:
        """A parsed turn, not yet taken: (the temperature to draw it again at, the draw's seed or None
        for an unseeded draw), or None to take it. ``draws`` is how many times this turn was drawn
        again already (the code agent draws a turn that repeats failed code again,
        ``CodeAgentConfig.redraw``; its seed makes an eval with redraws repeatable)."""

    def out_of_budget(self, traj: Trajectory) -> None:
        """The turns or tokens ran out before a final action (``traj.stop_reason`` says which): the
        last chance to settle the episode (the code agent scores the code that last ran)."""

    def wrap(self, body: str) -> str:
        """The observation text as it enters the token stream."""


class EpisodeState(TypedDict):
    traj: Trajectory
    env: Any
    policy: Any
    on_step: Callable[[Trajectory, Step], None] | None
    pending: Any  # the action the policy chose, for the tool or final node


def _now() -> float:
    return time.perf_counter()


# ---- exit conditions, named ---------------------------------------------------------------------
def exceeded_turns(traj: Trajectory, env: Environment) -> bool:
    return len(traj.steps) >= env.turn_limit


def exceeded_tokens(traj: Trajectory, env: Environment) -> bool:
    """Full context only: the stream is the prompt, so it must leave room for a turn."""
    return not env.managed and len(traj.prompt_ids) + len(traj.token_ids) >= env.config.max_total_tokens - 8


def chat_prompt_ids(tokenizer, messages: list[dict], max_total_tokens: int, what: str) -> list[int]:
    """The opening messages through the chat template; the prompt may take half the token budget."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    ids = list(ids)
    if len(ids) > max_total_tokens // 2:
        raise ValueError(f"{what} is too long ({len(ids)} prompt tokens; at most {max_total_tokens // 2} "
                         f"with max_total_tokens={max_total_tokens})")
    return ids


# ---- nodes --------------------------------------------------------------------------------------
def policy_node(state: EpisodeState) -> Command[Literal["tool", "final", "policy", "__end__"]]:
    traj, env = state["traj"], state["env"]
    if exceeded_turns(traj, env) or exceeded_tokens(traj, env):
        traj.stop_reason = "max_turns" if exceeded_turns(traj, env) else "max_tokens"
        env.out_of_budget(traj)
        return Command(goto=END)
    prompt = env.prompt(traj)
    budget = min(env.config.max_new_tokens, env.window - len(prompt))
    t0 = _now()
    gen = generate_turn(state["policy"], env, prompt, budget)
    step, action = env.parse(traj, gen, prompt, _now() - t0)
    drawn, draws = (step, action), 0
    while (again := env.redraw(traj, step, draws)) is not None:
        draws += 1
        gen = generate_turn(state["policy"], env, prompt, budget, *again)
        step, action = env.parse(traj, gen, prompt, _now() - t0)
    if draws and not step.valid and drawn[0].valid:
        # a sample that is no tool call at all is worse than the repeat: in the context it is
        # copied by every greedy turn after it
        step, action = drawn
    if draws:
        step.info["redrawn"] = draws
    traj.append_turn(step)
    if env.is_final(step):
        return Command(goto="final", update={"pending": action})
    if not step.valid:
        observe(state, step, env.invalid(traj, step, action))
        return Command(goto="policy", update={"pending": None})
    return Command(goto="tool", update={"pending": action})


def tool_node(state: EpisodeState) -> Command[Literal["policy", "__end__"]]:
    traj, env = state["traj"], state["env"]
    step = traj.steps[-1]
    t0 = _now()
    obs = env.act(traj, step, state["pending"])
    step.seconds += _now() - t0
    observe(state, step, obs)
    if env.done(traj):
        return Command(goto=END, update={"pending": None})
    return Command(goto="policy", update={"pending": None})


def final_node(state: EpisodeState) -> Command[Literal["__end__"]]:
    traj, env = state["traj"], state["env"]
    step = traj.steps[-1]
    t0 = _now()
    obs = env.finish(traj, step, state["pending"])
    step.seconds += _now() - t0
    if obs is None:
        _emit(state, step)
    else:
        observe(state, step, obs)
    return Command(goto=END)


def generate_turn(policy, env: Environment, prompt: list[int], budget: int,
                  temperature: float | None = None, seed: int | None = None) -> Generation:
    """One policy turn, up to the environment's stop strings.

    ``temperature`` overrides the config's and ``seed`` seeds the draw (a redrawn turn).
    """
    temperature = env.config.temperature if temperature is None else temperature
    seeded = {"seeds": [seed]} if seed is not None else {}  # any policy takes a call without seeds
    gen = policy.generate([list(prompt)], max_new_tokens=budget, temperature=temperature,
                          stop=env.stop_strings, stop_loops=env.stop_loops, **seeded)[0]
    return Generation(gen.text, list(gen.token_ids), list(gen.logprobs), gen.finish_reason)


def observe(state: EpisodeState, step: Step, obs: Observation) -> None:
    """Append an observation; the body is truncated to the budget, the note never is."""
    env, (body, note) = state["env"], obs
    tok = env.tokenizer
    ids = tok.encode(body, add_special_tokens=False)
    if len(ids) > env.config.observation_tokens:
        body = tok.decode(ids[: env.config.observation_tokens]) + " ...(truncated)"
    if note:
        body = f"{body}\n{note}"
    text = env.wrap(body)
    state["traj"].append_observation(step, text, tok.encode(text, add_special_tokens=False))
    _emit(state, step)


def _emit(state: EpisodeState, step: Step) -> None:
    if state["on_step"] is not None:
        state["on_step"](state["traj"], step)


def _build():
    g = StateGraph(EpisodeState)
    g.add_node("policy", policy_node)
    g.add_node("tool", tool_node)
    g.add_node("final", final_node)
    g.add_edge(START, "policy")
    return g.compile()


_GRAPH = None
_GRAPH_LOCK = threading.Lock()


def graph():
    """The compiled graph, built on first use and shared by every episode and thread."""
    global _GRAPH
    with _GRAPH_LOCK:
        if _GRAPH is None:
            _GRAPH = _build()
    return _GRAPH


# ---- entry points -------------------------------------------------------------------------------
def run_episode(policy, env: Environment, traj: Trajectory | None = None,
                on_step: Callable[[Trajectory, Step], None] | None = None) -> Trajectory:
    """Run one episode to its end; ``traj`` (from ``env.new_trajectory()``) may be given to resume none."""
    traj = traj if traj is not None else env.new_trajectory()
    t0 = _now()
    state = {"traj": traj, "env": env, "policy": policy, "on_step": on_step, "pending": None}
    graph().invoke(state, {"recursion_limit": 3 * env.config.max_turns + 5})
    traj.meta["seconds"] = _now() - t0
    return traj


def run_episodes(items: list[Any], policy, make_env: Callable[[Any, int], Environment], *,
                 progress: bool = True, on_result: Callable[[Trajectory], None] | None = None,
                 concurrency: int = 8, stop: threading.Event | None = None, desc: str = "trajectories",
                 unit: str = "q") -> list[Trajectory]:
    """Run many episodes concurrently through one batched policy; results in input order.

    ``make_env(item, index)`` gives each episode its own environment (and so its own browser
    state).  An episode that cannot even start (empty or too long a prompt) yields a trajectory
    with stop_reason "error" instead of aborting the batch.  Once ``stop`` is set, episodes not yet
    started are skipped (left out of the results) while those in flight run to the end and reach
    ``on_result``.  A ``BatchingPolicy`` made here is closed when the batch ends.
    """
    from tqdm import tqdm

    own = not isinstance(policy, BatchingPolicy)
    batched = BatchingPolicy(policy, max_batch=concurrency) if own else policy
    openmp.release()  # this thread only waits from here on; its pool would slow the batched policy's
    results: list[Trajectory | None] = [None] * len(items)

    interrupted = threading.Event()

    def one(i: int) -> Trajectory | None:
        if interrupted.is_set() or (stop is not None and stop.is_set()):
            return None
        env = make_env(items[i], i)
        try:
            return run_episode(batched, env)
        except ValueError as e:  # the prompt cannot start (empty, too long): this episode only
            return env.failed_trajectory(str(e))

    def record(fut) -> None:
        traj = fut.result()
        if traj is None:  # skipped after a stop
            return
        results[futures[fut]] = traj
        if on_result is not None:
            on_result(traj)
        bar.update(1)

    bar = tqdm(total=len(items), desc=desc, disable=not progress, unit=unit)
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = {pool.submit(one, i): i for i in range(len(items))}
            seen = set()
            try:
                for fut in as_completed(futures):
                    seen.add(fut)
                    record(fut)
            except KeyboardInterrupt:
                # Ctrl-C (or the recipe's --stop-after): episodes not started are dropped, those in
                # flight finish and reach on_result, so a resumed run loses no finished work
                interrupted.set()
                for fut in futures:
                    fut.cancel()
                for fut in futures:
                    if fut not in seen and not fut.cancelled():
                        try:
                            record(fut)
                        except Exception:  # noqa: BLE001  (the interrupt is what the caller sees)
                            pass
                raise
    finally:
        bar.close()
        if own:
            batched.close()
    return [r for r in results if r is not None]
