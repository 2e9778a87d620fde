"""Task types: everything the trainer and the eval runner need to know about a kind of task, as one object.

A task type (``TaskType``) says where tasks come from, what one episode's item is (and so its id),
how G rollout items are made of one task, which environment runs them (through the one agent loop),
which browser that environment searches, the default reward, what counts as correct, which tools are
worth counting, and where supervised examples come from.  The trainer (``research_agent.train``) and
the eval runner (``eval.runner.evaluate``) take one of these — as TRL's ``GRPOTrainer`` takes a
``rollout_func`` or an environment — and never ask which kind they have, so a third kind of task is a
third class here, not a branch in either.

A config here is any object with the trainer's fields (``TrainConfig``): ``tasks``, ``split``,
``retrieval``, ``agent`` (the rollouts' agent config), ``group_size``, ``compute.concurrency`` ...
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from corpus.factbook import hops, ill_posed
from corpus.files import read_jsonl

from .trajectory import Trajectory

DEFAULT_CODE_TASKS = "dataframebench:train"


class TaskSetupError(SystemExit):
    """The tasks named by the config cannot be loaded (said in the user's terms)."""


def default_task_file() -> Path:
    """The shipped Factbook question set (train / dev / test splits)."""
    return Path(__file__).resolve().parent / "data" / "factbook_qa.jsonl"


class TaskType(Protocol):
    """What the trainer and the eval runner ask of a kind of task.

    ``cfg`` is the trainer's config (``TrainConfig``); ``config`` the agent's (what ``agent_config``
    makes of ``cfg``, or what ``eval`` builds from its flags).  A task is what ``load_tasks`` returns;
    an item is one episode's input, a dict whose ``"id"`` names it (the eval resumes by that id).
    """

    name: str  # "research", "code": --task-type, and what a run directory records
    defaults: dict[str, Any]  # trainer config fields left unset take these (the reward, the budgets)
    tools: tuple[str, ...]  # the tool calls the trainer counts per step

    def prepare(self, cfg: Any) -> None:
        """Checks before any model loads."""

    def load_tasks(self, cfg: Any) -> list[Any]:
        """The tasks the config names."""

    def make_browser(self, cfg: Any) -> Any:
        """What the environment searches (None where nothing is searched)."""

    def agent_config(self, cfg: Any) -> Any:
        """The agent's config for rollouts of this trainer config."""

    def item(self, task: Any) -> dict:
        """One episode's item for ``task``; its ``"id"`` is the task's."""

    def group_items(self, task: Any, step: int, cfg: Any) -> list[dict]:
        """The G rollout items of one task at one step; ids name task, step and sample."""

    def run(self, items: list[dict], policy: Any, browser: Any, config: Any, *, progress: bool = True,
            on_result: Callable[[Trajectory], None] | None = None, concurrency: int = 8,
            stop: threading.Event | None = None) -> list[Trajectory]:
        """Episodes of ``items`` through one batched policy; ``on_result`` sees each as it ends, and once
        ``stop`` is set no more start (those in flight finish)."""

    def run_rollouts(self, items: list[dict], policy: Any, browser: Any, cfg: Any) -> list[Trajectory]:
        """``run`` with the trainer's config: its agent config, concurrency, no progress bars."""

    def is_correct(self, traj: Trajectory, cfg: Any) -> bool:
        """Whether an episode solved its task (the trainer's pass rate and dynamic filter)."""

    def check_sft(self, cfg: Any) -> None:
        """Before any model loads: what SFT needs is there."""

    def sft_examples(self, tok: Any, cfg: Any, out: Path, resume: bool, progress: bool
                     ) -> tuple[list[tuple[list[int], list[int]]], int]:
        """(input_ids, loss_mask) examples for SFT, and how many were skipped."""


@dataclass
class ResearchTasks:
    """Questions answered with search / open / find over a corpus; correct when F1 ≥ the threshold.

    ``guidance(item)`` is text put before each question (case memory, answer-format hints; ``eval qa``).
    """

    guidance: Callable[[dict], str] | None = None

    name: ClassVar[str] = "research"
    # Config fields left unset take these: F1 + action penalty (seed 003), short fast-template turns.
    defaults: ClassVar[dict[str, Any]] = {"reward": "f1_penalty", "max_new_tokens": 48, "max_total_tokens": 1024,
                                          "max_tool_calls": 3}
    tools: ClassVar[tuple[str, ...]] = ("search", "open", "find")

    def prepare(self, cfg: Any) -> None:
        """Checks before any model loads (nothing for research tasks)."""

    def load_tasks(self, cfg: Any) -> list[dict]:
        path = cfg.tasks or str(default_task_file())
        min_hops = cfg.curriculum.min_hops
        items = [it for it in read_jsonl(path, required=("question",), split=cfg.split or None)
                 if not ill_posed(it) and hops(it) >= min_hops]
        if not items:
            raise TaskSetupError(f"no tasks with split {cfg.split!r}"
                                 f"{f' and at least {min_hops} hops' if min_hops > 1 else ''} in {path}")
        return items

    def make_browser(self, cfg: Any) -> Any:
        from corpus import open_browser

        return open_browser(corpus=cfg.retrieval.corpus, retrieval_url=cfg.retrieval.url,
                            retriever=cfg.retrieval.retriever)

    def agent_config(self, cfg: Any) -> Any:
        return cfg.agent

    def item(self, task: dict) -> dict:
        return {**task, "id": str(task.get("id", ""))}

    def group_items(self, task: dict, step: int, cfg: Any) -> list[dict]:
        """The G rollout items of one task at one step; ids name task, step and sample."""
        return [{**task, "id": f"{task.get('id', '')}::s{step}g{g}"} for g in range(cfg.group_size)]

    def run(self, items: list[dict], policy: Any, browser: Any, config: Any, *, progress: bool = True,
            on_result: Callable[[Trajectory], None] | None = None, concurrency: int = 8,
            stop: threading.Event | None = None) -> list[Trajectory]:
        from .agent import run_batch

        by_id = {str(it.get("id", "")): it for it in items}

        def record(traj: Trajectory) -> None:
            for key, value in by_id.get(traj.id, {}).items():  # gold travels with the record, whatever
                if key not in ("id", "question"):  # the agent kept
                    traj.gold.setdefault(key, value)
            if on_result is not None:
                on_result(traj)

        return run_batch(items, policy, browser, config, progress=progress, on_result=record,
                         concurrency=concurrency, guidance=self.guidance, stop=stop)

    def run_rollouts(self, items: list[dict], policy: Any, browser: Any, cfg: Any) -> list[Trajectory]:
        return self.run(items, policy, browser, self.agent_config(cfg), progress=False, concurrency=cfg.compute.concurrency)

    def is_correct(self, traj: Trajectory, cfg: Any) -> bool:
        from rewards.qa import token_f1

        return token_f1(traj.answer, traj.gold.get("answers", [])) >= cfg.scoring.pass_threshold

    def check_sft(self, cfg: Any) -> None:
        """Before any model loads: SFT needs an export to learn from."""
        if not cfg.tasks:
            raise TaskSetupError("--stage sft needs --tasks SFT.jsonl (from `python -m synth sft-export`)")

    def sft_examples(self, tok, cfg: Any, out: Path, resume: bool, progress: bool
                     ) -> tuple[list[tuple[list[int], list[int]]], int]:
        """Exported trajectories (``synth sft-export``) rendered with the student's tokenizer."""
        examples, skipped = [], 0
        for r in load_sft_records(cfg.tasks):
            found = render_examples(tok, r, cfg.agent)
            examples += found
            skipped += not found
        return examples, skipped


class CodeTasks:
    """Programming tasks solved with search docs / execute / submit; correct when the tests pass."""

    name: ClassVar[str] = "code"
    # Code turns hold whole functions and DataFrameBench prompts run to ~800 tokens; the seed's reward
    # shaping (ToRL's is "code_torl"); the tool cap counts search + execute (submit is never capped).
    defaults: ClassVar[dict[str, Any]] = {"reward": "code_shaped", "max_new_tokens": 512, "max_total_tokens": 4096,
                                          "max_tool_calls": 4}
    tools: ClassVar[tuple[str, ...]] = ("search", "execute", "submit")

    def prepare(self, cfg: Any) -> None:
        """Rollouts run model-written code: refuse a sandbox that cannot contain it, unless told."""
        from .code.sandbox import SandboxError, require_contained

        try:
            level = require_contained(cfg.code.allow_unsafe_sandbox)
        except SandboxError as e:
            raise TaskSetupError(f"error: {e}") from None
        print(f"code sandbox: {level}", file=sys.stderr)

    def load_tasks(self, cfg: Any) -> list[Any]:
        """``CodeTask``s from the same loaders and specs as ``eval code``."""
        from .code.tasks import load_tasks as load_code_tasks

        spec = cfg.tasks or DEFAULT_CODE_TASKS
        try:
            tasks = load_code_tasks(spec)
        except ValueError as e:  # TaskSourceError included: a bad spec or file, said in the user's terms
            raise TaskSetupError(f"error: {e}") from None
        if not tasks:
            raise TaskSetupError(f"no code tasks in {spec}")
        return tasks

    def make_browser(self, cfg: Any) -> Any:
        """API docs for multi-tool (the cached corpus ``eval code`` uses too, so a policy is evaluated
        against the documentation it learned to search); no browser for the other modes."""
        if cfg.agent.mode != "multi-tool":
            return None
        if cfg.retrieval.url:
            from corpus import open_browser

            return open_browser("remote", retrieval_url=cfg.retrieval.url)
        from .code.apidocs import api_docs_browser

        return api_docs_browser(cfg.retrieval.corpus, cfg.code.docs_modules or None, retriever=cfg.retrieval.retriever)

    def agent_config(self, cfg: Any) -> Any:
        return cfg.agent

    def item(self, task: Any) -> dict:
        return {"id": task.id, "task": task}

    def group_items(self, task: Any, step: int, cfg: Any) -> list[dict]:
        return [{"id": f"{task.id}::s{step}g{g}", "task": task} for g in range(cfg.group_size)]

    def run(self, items: list[dict], policy: Any, browser: Any, config: Any, *, progress: bool = True,
            on_result: Callable[[Trajectory], None] | None = None, concurrency: int = 8,
            stop: threading.Event | None = None) -> list[Trajectory]:
        from .code.agent import run_code_batch

        return run_code_batch(items, policy, browser, config, progress=progress, on_result=on_result,
                              concurrency=concurrency, stop=stop)

    def run_rollouts(self, items: list[dict], policy: Any, browser: Any, cfg: Any) -> list[Trajectory]:
        return self.run(items, policy, browser, self.agent_config(cfg), progress=False, concurrency=cfg.compute.concurrency)

    def is_correct(self, traj: Trajectory, cfg: Any) -> bool:
        return bool(traj.gold.get("passed"))

    def check_sft(self, cfg: Any) -> None:
        """Code SFT needs no export: the tasks' reference solutions are demonstrated."""

    def sft_examples(self, tok, cfg: Any, out: Path, resume: bool, progress: bool
                     ) -> tuple[list[tuple[list[int], list[int]]], int]:
        """Demonstrations replayed from the tasks' reference solutions through the live code agent
        (``code.demos``) into OUT/demos.jsonl, kept on --resume so an interrupted build continues."""
        from .code.demos import build_demos

        path = Path(out) / "demos.jsonl"
        if not resume and path.exists():
            path.unlink()
        demos = build_demos(self.load_tasks(cfg), tok, self.agent_config(cfg), path,
                            docs_browser=self.make_browser(cfg), limit=cfg.code.demo_tasks, recovery=cfg.code.demo_recovery,
                            progress=progress)
        examples, skipped = [], 0
        for traj in demos:
            for ids, mask in traj.sequences():
                if len(ids) <= cfg.agent.max_total_tokens and any(mask):
                    examples.append((ids, mask))
                else:
                    skipped += 1
        return examples, skipped


TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (ResearchTasks(), CodeTasks())}


def get_task_type(name: str) -> TaskType:
    if name not in TASK_TYPES:
        raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, not {name!r}")
    return TASK_TYPES[name]


# ---- research SFT records, rendered as the agent renders a live episode -------------------------
def render_example(tok, record: dict, template: str | None = None, max_tokens: int = 1024
                   ) -> tuple[list[int], list[int]] | None:
    """(input_ids, loss_mask) for one exported trajectory, or None when it does not fit."""
    from . import prompts

    msgs = prompts.messages(record["question"], template or record.get("template", "fast"))
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    ids, mask = list(prompt), [0] * len(prompt)
    for turn in record["turns"]:
        c = tok.encode(turn["completion"], add_special_tokens=False)
        ids += c
        mask += [1] * len(c)
        if turn.get("observation"):
            o = tok.encode(turn["observation"], add_special_tokens=False)
            ids += o
            mask += [0] * len(o)
    if len(ids) > max_tokens or not any(mask):
        return None
    return ids, mask


def render_managed(tok, record: dict, template: str | None, cfg: Any) -> list[tuple[list[int], list[int]]]:
    """One (input_ids, loss_mask) per turn of a managed-context record, each within the window."""
    from .context import ContextBudgetError, managed_prompt

    out: list[tuple[list[int], list[int]]] = []
    done_c: list[str] = []
    done_o: list[str] = []
    for turn in record["turns"]:
        try:
            prompt = managed_prompt(tok, record["question"], done_c, done_o,
                                    template=template or record.get("template", "fast"),
                                    context_tokens=cfg.context_tokens, notes_tokens=cfg.notes_tokens,
                                    reserve=cfg.max_new_tokens)
        except ContextBudgetError:
            return []
        c = tok.encode(turn["completion"], add_special_tokens=False)
        if c and len(prompt) + len(c) <= cfg.context_tokens:
            out.append((prompt + c, [0] * len(prompt) + [1] * len(c)))
        done_c.append(turn["completion"])
        done_o.append(turn.get("observation", ""))
    return out


def render_examples(tok, record: dict, cfg: Any) -> list[tuple[list[int], list[int]]]:
    """The training examples of one exported record, in the context mode it was recorded in."""
    if record.get("context") == "managed":
        return render_managed(tok, record, cfg.template, cfg)
    example = render_example(tok, record, cfg.template, cfg.max_total_tokens)
    return [example] if example else []


def load_sft_records(path: str) -> list[dict]:
    """The records of a ``synth sft-export`` file; broken lines are skipped and counted."""
    return read_jsonl(path, required=("turns", "question"))
