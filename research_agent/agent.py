"""The research agent: one LangGraph graph for ``ask``, synthesis, evaluation and RL rollouts.

policy → (search | open | find) → policy → ... → answer.  Each node is a small function that
returns a ``Command`` naming the next node, so the possible transitions are in the type.  The
trajectory is one token stream (prompt, then model tokens interleaved with observation tokens),
which is exactly what the trainer masks and what the next turn's prompt is: no re-rendering, no
drift between what the model saw and what it is trained on.  With ``context="managed"`` each step's
prompt is instead rebuilt from the question, the model's notes and the last result (``context.py``)
and stored on the step, so the trainer still sees exactly what the model saw.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from corpus.browser import Browser, BrowserError

from . import prompts
from .actions import Action, parse_action
from .citations import check_citations
from .context import managed_prompt, strip_notes, written_notes
from .trajectory import Step, Trajectory


@dataclass
class AgentConfig:
    template: str = field(default="fast", metadata={"help": "fast (act directly, seed 003's default) or slow (<think> first)"})
    max_turns: int = field(default=6, metadata={"help": "policy turns before the run stops without an answer"})
    max_tool_calls: int = field(default=4, metadata={"help": "tool calls allowed; after that the model is told to answer (ToRL's C)"})
    max_new_tokens: int = field(default=96, metadata={"help": "tokens per policy turn"})
    max_total_tokens: int = field(default=2048, metadata={"help": "cap on prompt + trajectory tokens"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy (eval); 0.7 for rollouts (seed)"})
    search_k: int = field(default=3, metadata={"help": "hits shown per search"})
    observation_tokens: int = field(default=256, metadata={"help": "observations are truncated to this many tokens"})
    snippet_chars: int = field(default=300, metadata={"help": "characters of each hit's snippet"})
    semantic_citations: bool = field(default=False, metadata={"help": "also check citations by embedding similarity (slower)"})
    context: str = field(default="full", metadata={"help": "full: the prompt is the whole growing transcript; managed "
                         "(Tongyi DeepResearch): each step's prompt is rebuilt from the question, the model's running "
                         "<notes> and the last result, so long researches fit a fixed window"})
    context_tokens: int = field(default=1024, metadata={"help": "managed context: the most tokens one step may hold, "
                                "its prompt plus its turn (max_total_tokens applies to full context only)"})
    notes_tokens: int = field(default=128, metadata={"help": "managed context: the running notes are cut to this many "
                              "tokens, so they cannot crowd out the evidence"})

    def __post_init__(self):
        if self.context not in prompts.CONTEXTS:
            raise ValueError(f"context must be one of {prompts.CONTEXTS}, not {self.context!r}")
        if self.context == "managed" and self.context_tokens <= self.max_new_tokens:
            raise ValueError(f"context_tokens ({self.context_tokens}) must exceed max_new_tokens "
                             f"({self.max_new_tokens}): a step holds its prompt and its turn")

    @property
    def managed(self) -> bool:
        return self.context == "managed"

    def to_dict(self) -> dict[str, Any]:
        """A full-context config serializes as before managed context existed, so eval run directories
        made earlier still resume (their identity check compares this dict) and records stay unchanged."""
        d = asdict(self)
        if not self.managed:
            for name in MANAGED_ONLY:
                d.pop(name)
        return d


MANAGED_ONLY = ("context", "context_tokens", "notes_tokens")


class AgentState(TypedDict):
    traj: Trajectory
    pending: Action | None


def _now() -> float:
    return time.perf_counter()


class ResearchAgent:
    """Holds the policy, the browser and the compiled graph; ``run`` answers one question."""

    def __init__(self, policy, browser: Browser, config: AgentConfig | None = None,
                 on_step: Callable[[Trajectory, Step], None] | None = None):
        self.policy = policy
        self.browser = browser
        self.config = config or AgentConfig()
        self.tok = policy.tokenizer
        self.on_step = on_step
        self.graph = self._build()

    # ---- the graph ------------------------------------------------------------------------------
    def _build(self):
        g = StateGraph(AgentState)
        g.add_node("policy", self.policy_node)
        g.add_node("tool", self.tool_node)
        g.add_node("answer", self.answer_node)
        g.add_edge(START, "policy")
        return g.compile()

    def policy_node(self, state: AgentState) -> Command[Literal["tool", "answer", "policy", "__end__"]]:
        traj = state["traj"]
        cfg = self.config
        if exceeded_turns(traj, cfg):
            traj.stop_reason = "max_turns"
            return Command(goto=END)
        if not cfg.managed and exceeded_tokens(traj, cfg):
            traj.stop_reason = "max_tokens"
            return Command(goto=END)
        prompt = self._prompt(traj)
        window = cfg.context_tokens if cfg.managed else cfg.max_total_tokens
        budget = min(cfg.max_new_tokens, window - len(prompt))
        t0 = _now()
        gen = self.policy.generate([prompt], max_new_tokens=budget,
                                   temperature=cfg.temperature, stop=prompts.STOP_STRINGS)[0]
        action = parse_action(strip_notes(gen.text) if cfg.managed else gen.text,
                              finished=gen.finish_reason != "stop")
        step = Step(action=action.name, argument=action.argument, completion=gen.text, valid=action.valid,
                    completion_ids=list(gen.token_ids), completion_logprobs=list(gen.logprobs),
                    seconds=_now() - t0)
        if action.thought:
            step.info["thought"] = action.thought
        if cfg.managed:
            step.prompt_ids = prompt
            notes = written_notes(gen.text)
            if notes is not None:
                step.info["notes"] = notes
        traj.steps.append(step)
        traj.token_ids += step.completion_ids
        traj.token_mask += [1] * len(step.completion_ids)
        traj.logprobs += step.completion_logprobs
        if action.name == "answer":
            return Command(goto="answer", update={"pending": action})
        if not action.valid:
            step.error = action.reason
            self._observe(traj, step, prompts.INVALID_ACTION.format(reason=action.reason))
            return Command(goto="policy", update={"pending": None})
        return Command(goto="tool", update={"pending": action})

    def tool_node(self, state: AgentState) -> Command[Literal["policy"]]:
        traj, action = state["traj"], state["pending"]
        step = traj.steps[-1]
        t0 = _now()
        note = ""
        if no_tool_calls_left(traj, self.config, counting_current=True):
            step.error = "tool call limit reached"
            step.info["refused"] = True
            body = prompts.NO_CALLS_LEFT
        else:
            try:
                body = getattr(self, f"_{action.name}")(traj, step, action.argument)
            except BrowserError as e:
                step.error = str(e)
                body = prompts.TOOL_ERROR.format(message=e)
            left = self.config.max_tool_calls - _used_calls(traj)
            note = prompts.NO_CALLS_LEFT if left <= 0 else prompts.CALLS_LEFT.format(n=left)
        step.seconds += _now() - t0
        self._observe(traj, step, body, note)
        return Command(goto="policy", update={"pending": None})

    def answer_node(self, state: AgentState) -> Command[Literal["__end__"]]:
        traj, action = state["traj"], state["pending"]
        traj.answer = action.argument
        traj.citations = action.citations
        traj.stop_reason = "answer"
        report = check_citations(action.argument, action.citations, traj.retrieved,
                                 semantic=self.config.semantic_citations)
        traj.steps[-1].info.update(report)
        self._emit(traj, traj.steps[-1])
        return Command(goto=END)

    # ---- tools ------------------------------------------------------------------------------------
    def _search(self, traj: Trajectory, step: Step, query: str) -> str:
        hits = self.browser.search(query, k=self.config.search_k)
        step.info["hits"] = [h.chunk_id for h in hits]
        step.info["doc_ids"] = [h.doc_id for h in hits]
        if not hits:
            return prompts.NO_RESULTS
        lines = []
        for h in hits:
            snippet = " ".join(h.snippet.split())[: self.config.snippet_chars]
            lines.append(f"[{h.chunk_id}] {h.title}: {snippet}")
            traj.retrieved.setdefault(h.chunk_id, self._chunk_text(h.chunk_id, h.snippet))
        return "\n".join(lines)

    def _open(self, traj: Trajectory, step: Step, target: str) -> str:
        page = self.browser.open(target)
        step.info.update(doc_id=page.doc_id, page=page.page, chunk_ids=list(page.chunk_ids))
        for cid in page.chunk_ids:
            traj.retrieved.setdefault(cid, self._chunk_text(cid, ""))
        head = f"{page.title} ({page.doc_id}) page {page.page}/{page.total_pages}"
        cites = f"cite as: {' '.join('[' + c + ']' for c in page.chunk_ids[:4])}" if page.chunk_ids else ""
        return "\n".join(x for x in (head, cites, page.numbered()) if x)

    def _find(self, traj: Trajectory, step: Step, pattern: str) -> str:
        matches = self.browser.find(pattern)
        step.info["matches"] = [m.chunk_id for m in matches]
        step.info["doc_id"] = getattr(self.browser, "current_doc_id", None)
        if not matches:
            return f"No lines contain {pattern!r}."
        lines = []
        for m in matches[:8]:
            if m.chunk_id:
                traj.retrieved.setdefault(m.chunk_id, self._chunk_text(m.chunk_id, m.text))
            lines.append(f"L{m.line_no} [{m.chunk_id}]: {m.text}" if m.chunk_id else f"L{m.line_no}: {m.text}")
        return "\n".join(lines)

    def _chunk_text(self, chunk_id: str, fallback: str) -> str:
        try:
            return self.browser.chunk_text(chunk_id)
        except (BrowserError, AttributeError, KeyError):
            return fallback

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _observe(self, traj: Trajectory, step: Step, body: str, note: str = "") -> None:
        """Append an observation; the body is truncated to the budget, the note never is."""
        ids = self.tok.encode(body, add_special_tokens=False)
        if len(ids) > self.config.observation_tokens:
            body = self.tok.decode(ids[: self.config.observation_tokens]) + " ...(truncated)"
        if note:
            body = f"{body}\n{note}"
        text = prompts.OBSERVATION.format(body=body)
        step.observation = text
        step.observation_ids = self.tok.encode(text, add_special_tokens=False)
        traj.token_ids += step.observation_ids
        traj.token_mask += [0] * len(step.observation_ids)
        traj.logprobs += [0.0] * len(step.observation_ids)
        self._emit(traj, step)

    def _emit(self, traj: Trajectory, step: Step) -> None:
        if self.on_step is not None:
            self.on_step(traj, step)

    def _prompt(self, traj: Trajectory) -> list[int]:
        """What the model sees next: the whole stream (full) or a prompt rebuilt from state (managed)."""
        if not self.config.managed:
            return traj.prompt_ids + traj.token_ids
        return self._managed_prompt(traj.question, [s.completion for s in traj.steps],
                                    [s.observation for s in traj.steps], traj.meta.get("guidance", ""))

    def _managed_prompt(self, question: str, completions: list[str], observations: list[str],
                        guidance: str) -> list[int]:
        cfg = self.config
        return managed_prompt(self.tok, question, completions, observations, template=cfg.template,
                              context_tokens=cfg.context_tokens, notes_tokens=cfg.notes_tokens,
                              reserve=cfg.max_new_tokens, guidance=guidance)

    # ---- entry points ---------------------------------------------------------------------------
    def new_trajectory(self, question: str, *, id: str = "", gold: dict | None = None,
                       guidance: str = "") -> Trajectory:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("the question is empty")
        meta = {"template": self.config.template, "model": getattr(self.policy, "name", ""),
                "config": self.config.to_dict()}
        if self.config.managed:  # the question alone must fit; later steps are cut to fit
            prompt_ids = self._managed_prompt(question.strip(), [], [], guidance)
            if guidance:
                meta["guidance"] = guidance  # every rebuilt prompt shows it again
            return Trajectory(question=question.strip(), id=id, gold=dict(gold or {}), prompt_ids=prompt_ids,
                              meta=meta)
        msgs = prompts.messages(question.strip(), self.config.template, guidance)
        prompt_ids = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        prompt_ids = list(prompt_ids)
        if len(prompt_ids) > self.config.max_total_tokens // 2:
            raise ValueError(f"the question is too long ({len(prompt_ids)} prompt tokens; "
                             f"at most {self.config.max_total_tokens // 2})")
        return Trajectory(question=question.strip(), id=id, gold=dict(gold or {}), prompt_ids=prompt_ids,
                          meta=meta)

    def run(self, question: str, *, id: str = "", gold: dict | None = None, guidance: str = "") -> Trajectory:
        traj = self.new_trajectory(question, id=id, gold=gold, guidance=guidance)
        return self.run_trajectory(traj)

    def run_trajectory(self, traj: Trajectory) -> Trajectory:
        t0 = _now()
        limit = 3 * self.config.max_turns + 5
        self.graph.invoke({"traj": traj, "pending": None}, {"recursion_limit": limit})
        traj.meta["seconds"] = _now() - t0
        return traj


# ---- exit conditions, named ---------------------------------------------------------------------
def _used_calls(traj: Trajectory) -> int:
    return sum(1 for s in traj.steps if s.action in ("search", "open", "find") and not s.info.get("refused"))


def exceeded_turns(traj: Trajectory, cfg: AgentConfig) -> bool:
    return len(traj.steps) >= cfg.max_turns


def exceeded_tokens(traj: Trajectory, cfg: AgentConfig) -> bool:
    return len(traj.prompt_ids) + len(traj.token_ids) >= cfg.max_total_tokens - 8


def no_tool_calls_left(traj: Trajectory, cfg: AgentConfig, counting_current: bool = False) -> bool:
    used = _used_calls(traj) - (1 if counting_current else 0)
    return used >= cfg.max_tool_calls


def run_batch(items: list[dict], policy, browser: Browser, config: AgentConfig | None = None, *,
              progress: bool = True, on_result: Callable[[Trajectory], None] | None = None,
              concurrency: int = 8, guidance: Callable[[dict], str] | None = None) -> list[Trajectory]:
    """Run many questions concurrently through one batched policy; results in input order.

    Each item is {"id", "question", "answers", ...}; everything but the question becomes the
    trajectory's gold.  Each trajectory gets its own forked browser (its own opened document).
    A question that cannot even start (empty, too long) yields a trajectory with stop_reason
    "error" instead of aborting the batch.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm import tqdm

    from .policy import BatchingPolicy

    config = config or AgentConfig()
    batched = policy if isinstance(policy, BatchingPolicy) else BatchingPolicy(policy, max_batch=concurrency)
    results: list[Trajectory | None] = [None] * len(items)

    def one(i: int) -> Trajectory:
        item = items[i]
        b = browser.fork() if hasattr(browser, "fork") else browser
        agent = ResearchAgent(batched, b, config)
        gold = {k: v for k, v in item.items() if k not in ("question", "id")}
        try:
            return agent.run(item["question"], id=str(item.get("id", i)), gold=gold,
                             guidance=guidance(item) if guidance else "")
        except ValueError as e:
            return Trajectory(question=str(item.get("question", "")), id=str(item.get("id", i)), gold=gold,
                              stop_reason="error", meta={"error": str(e)})

    bar = tqdm(total=len(items), desc="trajectories", disable=not progress, unit="q")
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = {pool.submit(one, i): i for i in range(len(items))}
        for fut in as_completed(futures):
            traj = fut.result()
            results[futures[fut]] = traj
            if on_result is not None:
                on_result(traj)
            bar.update(1)
    bar.close()
    return [r for r in results if r is not None]
