"""The research agent as a graph for LangGraph Studio: ``langgraph dev`` loads ``graph`` (langgraph.json).

``graph`` takes ``{"question": ...}`` and answers it the way ``python -m research_agent.ask`` does:
the default model on the default corpus, unless the run's context (Studio's assistant
configuration) names others — ``model``, ``adapter``, ``endpoint``, ``corpus``, ``retrieval_url``
and the agent settings of ``ask`` (``max_turns``, ``max_tool_calls``, ``template``, ...).  The
state is plain JSON (the question; the answer, its citations and the text of the cited chunks,
the steps), so the server's checkpointer stores it as it is.  Each step is streamed as it is
taken (stream mode "custom").

Importing this module is cheap: it builds the graph and nothing else.  The model and the corpus
are loaded by the first run and kept for the next ones (one of each: a run naming another model
replaces the loaded one).  The episode runs the agent's own loop (``loop.py``), as its own graph
run rather than a subgraph of the Studio run, because its state holds the live policy and browser,
which a checkpointer must never try to store.  ``langgraph dev`` imports this file by path, not as
a package module, hence the absolute imports.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from research_agent.configs import COMMON_FLAGS

# the agent settings a run may set: ``ask``'s flags (research_agent.ask.ASK_FLAGS), the sampling temperature
# and the hits per search
AGENT_SETTINGS = (*COMMON_FLAGS, "template", "context_tokens", "temperature", "search_k")


class Question(TypedDict):
    question: str


class Answer(TypedDict, total=False):
    answer: str | None
    citations: list[str]
    sources: dict[str, str | None]  # each cited chunk id -> the text the agent read (None: never retrieved)
    citation_check: dict[str, Any]  # research_agent.citations.check_citations on the answer
    steps: list[dict[str, Any]]  # action, argument, observation, error of each turn
    stop_reason: str
    model: str
    seconds: float


class State(Question, Answer):
    pass


class Settings(TypedDict, total=False):
    """What a run's context may set; everything left out is ``ask``'s default."""

    model: str  # a named offline model, a local path or a hub id (default: qwen2.5-coder-0.5b)
    adapter: str  # a LoRA adapter directory
    endpoint: str  # an OpenAI-compatible server instead of a local model
    corpus: str  # a corpus directory (default: the default corpus, built on first use)
    retrieval_url: str  # a retrieval service (python -m corpus serve) instead of a corpus directory
    context: str
    max_turns: int
    max_tool_calls: int
    max_new_tokens: int
    template: str
    context_tokens: int
    temperature: float
    search_k: int


_loaded: dict[str, tuple[tuple, Any]] = {}  # "policy" / "browser" -> (what was asked for, the object)
_load_lock = threading.Lock()


def _cached(kind: str, key: tuple, load) -> Any:
    with _load_lock:
        held = _loaded.get(kind)
        if held is None or held[0] != key:
            _loaded.pop(kind, None)  # one model in memory at a time
            _loaded[kind] = (key, load())
        return _loaded[kind][1]


def _policy(settings: Settings):
    from research_agent.inference.models import DEFAULT_MODEL
    from research_agent.inference.policy import load_policy

    model = settings.get("model") or DEFAULT_MODEL
    key = (model, settings.get("adapter"), settings.get("endpoint"))
    return _cached("policy", key, lambda: load_policy(model, adapter=key[1], endpoint=key[2], progress=False))


def _browser(settings: Settings):
    from corpus import open_browser

    key = (settings.get("corpus"), settings.get("retrieval_url"))
    browser = _cached("browser", key, lambda: open_browser(corpus=key[0], retrieval_url=key[1]))
    return browser.fork() if hasattr(browser, "fork") else browser  # each run its own opened document


def agent_config(settings: Settings):
    """``ask``'s agent config with the run's settings over it (a bad value is a ``ConfigError``)."""
    from research_agent.agent import AgentConfig
    from research_agent.ask import ASK_DEFAULTS
    from research_agent.configs import build

    return build(AgentConfig, {**ASK_DEFAULTS, **{k: v for k, v in settings.items() if k in AGENT_SETTINGS}})


def step_record(step) -> dict[str, Any]:
    body = step.observation.strip().removeprefix("<result>").removesuffix("</result>").strip()
    return {"action": step.action, "argument": step.argument, "observation": body, "error": step.error}


def answer_record(traj) -> Answer:
    final = traj.steps[-1].info if traj.answered and traj.steps else {}
    return {
        "answer": traj.answer,
        "citations": list(traj.citations),
        "sources": {cid: traj.retrieved.get(cid) for cid in traj.citations},
        "citation_check": {k: final[k] for k in ("unretrieved", "supported", "support_rate") if k in final},
        "steps": [step_record(s) for s in traj.steps],
        "stop_reason": traj.stop_reason,
        "model": traj.meta.get("model", ""),
        "seconds": round(traj.meta.get("seconds", 0.0), 3),
    }


def research(state: State, runtime: Runtime[Settings]) -> Answer:
    """Answer the question with the research agent: search / open / find, then a cited answer."""
    from research_agent.agent import ResearchAgent

    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('the question is empty: give the input {"question": "..."}')
    settings: Settings = dict(runtime.context or {})
    config = agent_config(settings)
    policy, browser = _policy(settings), _browser(settings)
    writer = get_stream_writer()
    agent = ResearchAgent(policy, browser, config, on_step=lambda traj, step: writer({"step": step_record(step)}))
    # a fresh context: the episode is its own run of the agent loop, not a subgraph of this one
    traj = contextvars.Context().run(agent.run, question.strip())
    return answer_record(traj)


def build_graph():
    g = StateGraph(State, context_schema=Settings, input_schema=Question, output_schema=Answer)
    g.add_node("research", research)
    g.add_edge(START, "research")
    g.add_edge("research", END)
    return g.compile(name="research_agent")


graph = build_graph()
