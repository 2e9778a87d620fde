"""The research agent: the environment of search / open / find / answer, for ``ask``, synthesis,
evaluation and RL rollouts.

The loop itself (``loop.py``) is shared with the code agent; this module says what a research turn
means.  In full context the trajectory is one token stream (prompt, then model tokens interleaved
with observation tokens), which is exactly what the trainer masks and what the next turn's prompt
is: no re-rendering, no drift between what the model saw and what it is trained on.  With
``context="managed"`` each step's prompt is instead rebuilt from the question, the model's notes and
the last result (``context.py``) and stored on the step, so the trainer still sees exactly what the
model saw.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from corpus.browser import Browser, BrowserError

from . import prompts
from .actions import Action, parse_action
from .citations import check_citations
from .context import managed_prompt, strip_notes, written_notes
from .inference.policy import Generation
from .loop import chat_prompt_ids, run_episode, run_episodes
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
        for name in ("max_turns", "max_new_tokens", "max_total_tokens", "search_k", "observation_tokens",
                     "snippet_chars", "context_tokens", "notes_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_tool_calls < 0 or self.temperature < 0:
            raise ValueError("max_tool_calls and temperature must not be negative")
        if self.template not in prompts.TEMPLATES:
            raise ValueError(f"template must be one of {prompts.TEMPLATES}, not {self.template!r}")
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


class ResearchEnvironment:
    """One question's episode: search / open / find over a ``Browser``, then a cited answer.

    Implements ``loop.Environment``; the loop owns the limits, the generation call and the
    token stream, this class owns what the research agent's turns mean.
    """

    stop_strings = prompts.STOP_STRINGS
    stop_loops = False  # the research turns are short (48-96 tokens); a loop costs little

    def __init__(self, tokenizer, browser: Browser, config: AgentConfig, question: str, *, id: str = "",
                 gold: dict | None = None, guidance: str = "", model: str = ""):
        self.tokenizer = tokenizer
        self.browser = browser
        self.config = config
        self.question, self.id, self.gold, self.guidance, self.model = question, id, dict(gold or {}), guidance, model

    @property
    def managed(self) -> bool:
        return self.config.managed

    @property
    def turn_limit(self) -> int:
        return self.config.max_turns

    @property
    def window(self) -> int:
        return self.config.context_tokens if self.config.managed else self.config.max_total_tokens

    # ---- the episode ----------------------------------------------------------------------------
    def new_trajectory(self) -> Trajectory:
        question = self.question
        if not isinstance(question, str) or not question.strip():
            raise ValueError("the question is empty")
        question, guidance = question.strip(), self.guidance
        meta = {"template": self.config.template, "model": self.model, "config": self.config.to_dict()}
        if self.config.managed:  # the question alone must fit; later steps are cut to fit
            prompt_ids = self._managed_prompt(question, [], [], guidance)
            if guidance:
                meta["guidance"] = guidance  # every rebuilt prompt shows it again
        else:
            msgs = prompts.messages(question, self.config.template, guidance)
            prompt_ids = chat_prompt_ids(self.tokenizer, msgs, self.config.max_total_tokens, "the question")
        return Trajectory(question=question, id=self.id, gold=dict(self.gold), prompt_ids=prompt_ids, meta=meta)

    def failed_trajectory(self, error: str) -> Trajectory:
        return Trajectory(question=str(self.question or ""), id=self.id, gold=dict(self.gold), stop_reason="error",
                          meta={"error": error})

    def prompt(self, traj: Trajectory) -> list[int]:
        """What the model sees next: the whole stream (full) or a prompt rebuilt from state (managed)."""
        if not self.config.managed:
            return traj.prompt_ids + traj.token_ids
        return self._managed_prompt(traj.question, [s.completion for s in traj.steps],
                                    [s.observation for s in traj.steps], traj.meta.get("guidance", ""))

    def _managed_prompt(self, question: str, completions: list[str], observations: list[str],
                        guidance: str) -> list[int]:
        cfg = self.config
        return managed_prompt(self.tokenizer, question, completions, observations, template=cfg.template,
                              context_tokens=cfg.context_tokens, notes_tokens=cfg.notes_tokens,
                              reserve=cfg.max_new_tokens, guidance=guidance)

    def parse(self, traj: Trajectory, gen: Generation, prompt: list[int], seconds: float) -> tuple[Step, Action]:
        cfg = self.config
        action = parse_action(strip_notes(gen.text) if cfg.managed else gen.text,
                              finished=gen.finish_reason != "stop")
        step = Step(action=action.name, argument=action.argument, completion=gen.text, valid=action.valid,
                    completion_ids=list(gen.token_ids), completion_logprobs=list(gen.logprobs), seconds=seconds)
        if action.thought:
            step.info["thought"] = action.thought
        if cfg.managed:
            step.prompt_ids = prompt
            notes = written_notes(gen.text)
            if notes is not None:
                step.info["notes"] = notes
        if not action.valid and action.name != "answer":
            step.error = action.reason
        return step, action

    def is_final(self, step: Step) -> bool:
        return step.action == "answer"

    def invalid(self, traj: Trajectory, step: Step, action: Action) -> tuple[str, str]:
        return prompts.INVALID_ACTION.format(reason=action.reason), ""

    def act(self, traj: Trajectory, step: Step, action: Action) -> tuple[str, str]:
        if no_tool_calls_left(traj, self.config, counting_current=True):
            step.error = "tool call limit reached"
            step.info["refused"] = True
            return prompts.NO_CALLS_LEFT, ""
        try:
            body = getattr(self, f"_{action.name}")(traj, step, action.argument)
        except BrowserError as e:
            step.error = str(e)
            body = prompts.TOOL_ERROR.format(message=e)
        left = self.config.max_tool_calls - _used_calls(traj)
        return body, prompts.NO_CALLS_LEFT if left <= 0 else prompts.CALLS_LEFT.format(n=left)

    def finish(self, traj: Trajectory, step: Step, action: Action) -> None:
        traj.answer = action.argument
        traj.citations = action.citations
        traj.stop_reason = "answer"
        step.info.update(check_citations(action.argument, action.citations, traj.retrieved,
                                         semantic=self.config.semantic_citations))
        return None

    def done(self, traj: Trajectory) -> bool:
        return False  # only the answer ends a research episode

    def redraw(self, traj: Trajectory, step: Step, draws: int) -> tuple[float, int | None] | None:
        return None  # every research turn is taken as drawn

    def out_of_budget(self, traj: Trajectory) -> None:
        return None  # no answer is made up for the model: an unanswered question scores nothing

    def wrap(self, body: str) -> str:
        return prompts.OBSERVATION.format(body=body)

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


class ResearchAgent:
    """A policy, a browser and a config; ``run`` answers one question through the agent loop."""

    def __init__(self, policy, browser: Browser, config: AgentConfig | None = None,
                 on_step: Callable[[Trajectory, Step], None] | None = None):
        self.policy = policy
        self.browser = browser
        self.config = config or AgentConfig()
        self.tok = policy.tokenizer
        self.on_step = on_step

    def environment(self, question: str, *, id: str = "", gold: dict | None = None,
                    guidance: str = "") -> ResearchEnvironment:
        return ResearchEnvironment(self.tok, self.browser, self.config, question, id=id, gold=gold,
                                   guidance=guidance, model=getattr(self.policy, "name", ""))

    def new_trajectory(self, question: str, *, id: str = "", gold: dict | None = None,
                       guidance: str = "") -> Trajectory:
        return self.environment(question, id=id, gold=gold, guidance=guidance).new_trajectory()

    def run(self, question: str, *, id: str = "", gold: dict | None = None, guidance: str = "") -> Trajectory:
        env = self.environment(question, id=id, gold=gold, guidance=guidance)
        return run_episode(self.policy, env, on_step=self.on_step)


# ---- exit conditions, named ---------------------------------------------------------------------
def _used_calls(traj: Trajectory) -> int:
    return sum(1 for s in traj.steps if s.action in ("search", "open", "find") and not s.info.get("refused"))


def no_tool_calls_left(traj: Trajectory, cfg: AgentConfig, counting_current: bool = False) -> bool:
    used = _used_calls(traj) - (1 if counting_current else 0)
    return used >= cfg.max_tool_calls


def run_batch(items: list[dict], policy, browser: Browser, config: AgentConfig | None = None, *,
              progress: bool = True, on_result: Callable[[Trajectory], None] | None = None,
              concurrency: int = 8, guidance: Callable[[dict], str] | None = None,
              stop: threading.Event | None = None) -> list[Trajectory]:
    """Run many questions concurrently through one batched policy; results in input order.

    Each item is {"id", "question", "answers", ...}; everything but the question becomes the
    trajectory's gold.  Each trajectory gets its own forked browser (its own opened document).
    A question that cannot even start (empty, too long) yields a trajectory with stop_reason
    "error" instead of aborting the batch.  Once ``stop`` is set, questions not yet started are
    skipped while those in flight run to the end.
    """
    config = config or AgentConfig()
    tok, name = policy.tokenizer, getattr(policy, "name", "")

    def make_env(item: dict, i: int) -> ResearchEnvironment:
        b = browser.fork() if hasattr(browser, "fork") else browser
        gold = {k: v for k, v in item.items() if k not in ("question", "id")}
        return ResearchEnvironment(tok, b, config, item.get("question", ""), id=str(item.get("id", i)), gold=gold,
                                   guidance=guidance(item) if guidance else "", model=name)

    return run_episodes(items, policy, make_env, progress=progress, on_result=on_result, concurrency=concurrency,
                        stop=stop)
