"""The code environment: the seed's three tools (search docs, execute, submit) behind one parse/run pair.

The agent loop generates one turn until a stop string, calls ``parse`` on it, then ``run`` on the
action; the observation goes back to the model (the loop wraps and token-truncates it, and masks
it out of the loss). Actions are plain text, as in the research agent and the seed (004):

    <search>pandas groupby mean</search>        look up API documentation
    ```python\\n...\\n```                          run code, see stdout and the error's last line
    ```submit\\n...\\n```                          run the task's tests on the solution; ends the episode,
                                                 or, with test feedback, answers a failure and goes on

Generation of one turn stops at ``</search>`` or at a code block's closing fence ("\\n```\\n"), so a
turn holds at most one action; an opening fence with a language (```python) never matches the stop
string, but a bare ``` line does: such a turn ends at its opening fence, and the model is told so.
Some backends (vLLM) drop the stop string from the
output: the endpoint policy puts back the one the server names (vLLM's ``stop_reason``), and a final
block or tag left unclosed is accepted as if closed.
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

from research_agent.code import prompts
from research_agent.code.examples import EXAMPLE_FAILED
from research_agent.code.sandbox import DEFAULT_LIMITS, TEST_LIMITS, SandboxLimits, run_python, truncate
from research_agent.code.tasks import CodeTask, run_tests, sanitized_away
from research_agent.loop import chat_prompt_ids
from research_agent.trajectory import Step, Trajectory

MODES = ("no-tools", "code-only", "multi-tool")
OBSERVATION_CHARS = 2000
MAX_QUERY_CHARS = 300
SEARCH_HITS = 3
HIT_CHARS = 600
_SEARCH = re.compile(r"<search>(.*?)(</search>|\Z)", re.DOTALL | re.IGNORECASE)
# An opening fence with its info string, at the start of a line.
_FENCE = re.compile(r"(?m)^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n")
_CLOSE = re.compile(r"(?m)^[ \t]*```[ \t]*$")
_PYTHON_LANGS = {"python", "py", "python3"}

def draw_seed(seed: int, task_id: str, turn: int, draw: int) -> int:
    """The seed of one redrawn turn: a stable hash (not Python's salted ``hash``) of the run's seed,
    the task, the turn and the draw, so a re-run of the task draws the same turn."""
    digest = hashlib.blake2b(f"{seed}\x1f{task_id}\x1f{turn}\x1f{draw}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # below 2**63: vLLM's seed is a signed 64-bit integer


def _fences(text: str) -> list[tuple[str, str, int, bool]]:
    """Every fenced block in order: (kind, body, position, closed); kind is the language or 'plain'."""
    blocks, pos = [], 0
    while (f := _FENCE.search(text, pos)) is not None:
        rest = text[f.end() :]
        close = _CLOSE.search(rest)
        body = rest[: close.start()] if close else rest
        blocks.append((f.group(1).lower() or "plain", body, f.start(), close is not None))
        if close is None:
            break
        pos = f.end() + close.end()
    return blocks


def _first_action(text: str) -> tuple[str, str, int] | None:
    """(kind, body, position) of the earliest action: 'search', or a fence's language.

    A block with a language wins over an earlier bare one: a bare block is how models quote an error
    or output before the block they mean to run ("The error is:\n```\n...\n```\n```python ...").
    """
    found = []
    m = _SEARCH.search(text)
    # An unclosed tag is a search only when its rest reads as a query: a model that echoes a hint
    # ("write <search>, ```python or ```submit") must not search for the hint's text.
    if m and (m.group(2) or not re.search(r"[\n`<>]", m.group(1).strip())):
        found.append(("search", m.group(1), m.start()))
    blocks = _fences(text)
    tagged = [b for b in blocks if b[0] != "plain"]
    if tagged or blocks:
        kind, body, at, _ = (tagged or blocks)[0]
        found.append((kind, body, at))
    return min(found, key=lambda x: x[2]) if found else None


STOP_STRINGS = ["</search>", "\n```\n"]
# Actions that use up the tool budget; submit never does (it must stay possible to end the task).
BUDGETED = ("search", "execute")


class CodeEnvironment:
    """One task's episode: parses the model's turns and runs its tools in the sandbox."""

    stop_strings = STOP_STRINGS
    managed = False

    def __init__(
        self,
        task: CodeTask,
        docs_browser: Any = None,
        limits: SandboxLimits = DEFAULT_LIMITS,
        test_limits: SandboxLimits = TEST_LIMITS,
        submit_hint: bool = True,
        *,
        config: Any = None,
        tokenizer: Any = None,
        model: str = "",
        id: str = "",
    ):
        """``config`` (a ``CodeAgentConfig``) and ``tokenizer`` are needed only to run the episode
        through the agent loop; parsing and the tools work without them."""
        self.task = task
        self.submit_hint = submit_hint if config is None else config.submission.submit_hint
        self.config, self.tokenizer, self.model, self.id = config, tokenizer, model, id or task.id
        # the seed's "run tests" tool: a failed submission is answered and the episode goes on (tool
        # modes only: no-tools has one turn, so its submission is final either way)
        self.feedback = bool(config is not None and config.test_feedback and config.mode != "no-tools")
        self.last_result = None  # the ExecResult of the last submission's tests
        self.docs_browser = docs_browser
        self.limits = limits  # execute
        self.test_limits = test_limits  # submit: the task's tests
        self.submitted: str | None = None
        self.last_run: str | None = None  # the last executed code that defines the entry point (with a body)
        self.failed: dict[str, tuple[int, str]] = {}  # a failed submission's code (same_code) -> (number, failure)
        self.runs: list[tuple[int, str]] = []  # (run number, code) of each run defining the entry point
        self.executes = 0
        self.failed_runs: dict[str, int] = {}  # the code (same_code) of a run that raised -> its run number
        self._failed_at_run: int | None = None  # the run count when a submission was last answered FAIL
        self._passes_examples: dict[str, bool] = {}  # same_code -> verdict of the examples on it
        self.passed = False

    STOP_STRINGS = STOP_STRINGS  # the name parsers and demos have always used

    # ---- the episode (``loop.Environment``) ------------------------------------------------------
    @property
    def stop_loops(self) -> bool:
        return self.config.stop_loops

    @property
    def turn_limit(self) -> int:
        return self.config.turn_limit

    @property
    def window(self) -> int:
        return self.config.max_total_tokens

    def new_trajectory(self) -> Trajectory:
        cfg = self.config
        question = self.task_message(self.task)
        msgs = [{"role": "system", "content": self.instructions(cfg.mode, self.feedback)},
                {"role": "user", "content": question}]
        prompt_ids = chat_prompt_ids(self.tokenizer, msgs, cfg.max_total_tokens, f"task {self.task.id}")
        meta = {"task_type": "code", "mode": cfg.mode, "model": self.model, "config": cfg.to_dict()}
        return Trajectory(question=question, id=self.id, gold=task_gold(self.task), prompt_ids=prompt_ids, meta=meta)

    def failed_trajectory(self, error: str) -> Trajectory:
        return Trajectory(question=self.task.prompt, id=self.id, gold=task_gold(self.task), stop_reason="error",
                          meta={"task_type": "code", "mode": self.config.mode, "error": error})

    def prompt(self, traj: Trajectory) -> list[int]:
        return traj.prompt_ids + traj.token_ids

    def parse(self, traj: Trajectory, gen: Any, prompt: list[int], seconds: float) -> tuple[Step, tuple[str, str]]:
        action, argument, valid, error = self.parse_text(gen.text, self.config.mode)
        stub = action == "submit" and bool(argument) and self._stub(argument)
        from_last_run = action == "submit" and (not argument or stub)
        if action == "submit":
            argument, error = self.resolve_submit(argument)
            if error:
                action, valid = "invalid", False
        info = {"finish_reason": gen.finish_reason, **({"from_last_run": True} if from_last_run and valid else {}),
                **({"stub": True} if stub and valid else {})}
        step = Step(action=action, argument=argument, completion=gen.text, valid=valid, error=error,
                    completion_ids=list(gen.token_ids), completion_logprobs=list(gen.logprobs), seconds=seconds,
                    info=info)
        return step, (action, argument)

    def is_final(self, step: Step) -> bool:
        return step.action == "submit" and not self.feedback

    def done(self, traj: Trajectory) -> bool:
        return self.feedback and traj.stop_reason == "submit"

    def redraw(self, traj: Trajectory, step: Step, draws: int) -> tuple[float, int] | None:
        """Draw a turn again when it would run or submit a failed submission's code, or run the code
        of a run that raised (``redraw_repeats``, ``redraw_failed_runs``): told the code failed, a
        greedy model repeats it, and a repeated turn can only fail again. The turn is taken as it is
        once the draws are spent (then flagged as a repeat) or on a turn that is not such a repeat.
        Each draw has its own seed (``draw_seed``)."""
        cfg = self.config
        if cfg is None or not self.feedback or draws >= cfg.redraw.repeats or not (self.failed or self.failed_runs):
            return None
        redraw = cfg.redraw
        if draws and not step.valid:  # a malformed sample: draw again (the repeat is kept if all are)
            return redraw.temperature, draw_seed(redraw.seed, self.task.id, len(traj.steps), draws)
        if not step.valid or step.action not in ("execute", "submit"):
            return None
        key = same_code(step.argument)
        raised = step.action == "execute" and redraw.failed_runs and key in self.failed_runs
        if key not in self.failed and not raised:
            return None
        return redraw.temperature, draw_seed(redraw.seed, self.task.id, len(traj.steps), draws)

    def out_of_budget(self, traj: Trajectory) -> None:
        """SWE-agent's autosubmit (``submit_last_run_at_limit``): an episode that ran out of turns
        having run the entry point is scored on the code that last ran when no submission was tested,
        or when that run came after the last FAIL answer (the fix being tried). ``traj.meta
        ["autosubmitted"]`` says so; no submit step is added, so the submit rate and the shaped
        reward's no-submission penalty still read the model's own actions."""
        if not self._option("submit_last_run_at_limit") or self.config is None or self.config.mode == "no-tools":
            return
        code = self.last_run if self.submitted is None else self._run_after_failure()
        if code is None:
            return
        _, info, _ = self.run("submit", code)  # tested and recorded as any submission is
        traj.answer, traj.gold["passed"] = code, bool(info.get("passed"))
        traj.meta["autosubmitted"] = True

    def _run_after_failure(self) -> str | None:
        """The code of a run made after the last submission was answered FAIL, unless it is a failed
        submission's code: the fix the model was trying when its turns ran out. Decided on what the
        model was shown (the FAIL answer), never on the hidden score."""
        if self._failed_at_run is None or not self.runs:
            return None
        n, code = self.runs[-1]
        if n <= self._failed_at_run or same_code(code) in self.failed:
            return None
        return code

    def invalid(self, traj: Trajectory, step: Step, action: tuple[str, str]) -> tuple[str, str]:
        body, _, _ = self.run("invalid", step.error or "")
        return body, self.budget_note(traj)

    def act(self, traj: Trajectory, step: Step, action: tuple[str, str]) -> tuple[str, str]:
        name, argument = action
        if name == "submit":  # with test feedback: a tool whose answer is the verdict
            return self._submit_with_feedback(traj, step, argument)
        if used_calls(traj) > self.config.max_tool_calls:  # the current step already counts
            step.error = "tool call limit reached"
            step.info["refused"] = True
            return prompts.NO_CALLS_LEFT, ""
        body, info, _ = self.run(name, argument)
        step.info.update(info)
        if name == "execute" and info.get("error"):
            step.error = info["error"]
        note = self.budget_note(traj)
        if step.info.get("note") and note != "":  # the submit hint, when a turn follows
            note = f"{step.info['note']} {note}"
        return body, note

    def finish(self, traj: Trajectory, step: Step, action: tuple[str, str]) -> tuple[str, str]:
        body, info, _ = self.run("submit", action[1])
        step.info.update(info)
        traj.answer = action[1]
        traj.gold["passed"] = bool(info.get("passed"))
        traj.stop_reason = "submit"
        # the test verdict is shown (and masked out), so a multi-episode learner sees why it failed
        return self._stub_note(step, body), ""

    def _submit_with_feedback(self, traj: Trajectory, step: Step, code: str) -> tuple[str, str]:
        """Test the submission; it becomes the answer (the last one is scored). A pass ends the
        episode; a failure shows which tests failed and why, and the model may fix and resubmit."""
        body, info, _ = self.run("submit", code)
        step.info.update(info, submission=traj.count("submit"))
        if "passed" not in info:  # not tested (an empty submission with nothing run): an invalid action
            return body, self.budget_note(traj)
        traj.answer = self.submitted
        traj.gold["passed"] = bool(info.get("passed"))
        last_turn = len(traj.steps) >= self.config.turn_limit
        if "visible_tests" in self.task.meta:  # the scoring tests are hidden: answer from the examples
            body, note = self._answer_from_examples(traj, step, last_turn)
            return self._stub_note(step, body), note
        if info.get("passed"):
            traj.stop_reason = "submit"
            return self._stub_note(step, body), ""
        if last_turn:
            traj.stop_reason = "submit"
        details = failure_details(self.last_result) if self.last_result is not None else body
        return self._stub_note(step, self._failed(step, details)), self.budget_note(traj)

    def _failed(self, step: Step, details: str) -> str:
        """The FAIL answer; a repeat of a failed submission is told so (``flag_repeats``)."""
        body = prompts.TESTS_FAIL.format(details=details)
        key = same_code(self.submitted or "")
        self._failed_at_run = self.executes  # runs after this one are the model's next attempt
        if key in self.failed and self._option("flag_repeats"):
            step.info["repeat_of"] = self.failed[key][0]
            return f"{prompts.SAME_AS_FAILED.format(n=self.failed[key][0])}\n{body}"
        self.failed.setdefault(key, (step.info["submission"], (details.splitlines() or [""])[0]))
        return body

    def _stub_note(self, step: Step, body: str) -> str:
        if step.info.get("stub"):
            return f"{prompts.STUB_SUBMITTED.format(name=self.task.entry_point)}\n{body}"
        return body

    def _option(self, name: str) -> bool:
        """A switch of ``CodeAgentConfig.submission``; on where the environment only parses and runs (no config)."""
        return True if self.config is None else bool(getattr(self.config.submission, name))

    def _stub(self, code: str) -> bool:
        """A submission to be read as "the code I just ran" (``stub_submits_last_run``; tool modes)."""
        if self.config is not None and self.config.mode == "no-tools":
            return False
        return self._option("stub_submits_last_run") and entry_point_is_stub(code, self.task.entry_point)

    def _answer_from_examples(self, traj: Trajectory, step: Step, last_turn: bool) -> tuple[str, str]:
        """HumanEval-style feedback: the verdict on the prompt's own examples, never on the hidden
        tests (the score, already in ``traj.gold``). Passing the examples ends the episode, as does
        a task without examples (its first submission is final, as without feedback)."""
        if not self.task.meta.get("visible_tests"):
            traj.stop_reason = "submit"
            step.info["visible_passed"] = None
            return prompts.SUBMITTED_NO_EXAMPLES, ""
        res = run_tests(self.task, self.submitted or "", self.test_limits, visible=True)
        step.info["visible_passed"] = res.ok
        if res.ok:
            traj.stop_reason = "submit"
            return prompts.EXAMPLES_PASSED, ""
        if last_turn:
            traj.stop_reason = "submit"
        body = self._failed(step, failure_details(res))
        run = None if last_turn else self._passing_run()
        if run is not None:
            step.info["passing_run"] = run[0]
            self.last_run = run[1]
            body = f"{body}\n{prompts.RUN_PASSES_EXAMPLES.format(n=run[0])}"
        return body, self.budget_note(traj)

    def _passing_run(self) -> tuple[int, str] | None:
        """The latest earlier run whose code, other than the failed submission's, passes the
        examples (``recall_passing_run``). Each distinct code is checked once, in the sandbox."""
        if not self._option("recall_passing_run"):
            return None
        failed = same_code(self.submitted or "")
        for n, code in reversed(self.runs):
            key = same_code(code)
            if key == failed or key in self.failed:
                continue
            if key not in self._passes_examples:
                self._passes_examples[key] = run_tests(self.task, code, self.test_limits, visible=True).ok
            if self._passes_examples[key]:
                return n, code
        return None

    def budget_note(self, traj: Trajectory) -> str:
        """What the model must know about its remaining budget (never truncated away)."""
        cfg = self.config
        if cfg.mode == "no-tools" or len(traj.steps) >= cfg.turn_limit:
            return ""  # no turn follows: a budget note would only mislead readers of the record
        if len(traj.steps) == cfg.turn_limit - 1:
            return prompts.LAST_TURN
        left = cfg.max_tool_calls - used_calls(traj)
        return prompts.NO_CALLS_LEFT if left <= 0 else prompts.CALLS_LEFT.format(n=left)

    def wrap(self, body: str) -> str:
        frame = chat_observation_frame(self.tokenizer) if self.config.observation_format == "chat" else None
        if frame:
            return prompts.CHAT_OBSERVATION.format(before=frame[0], body=body, after=frame[1])
        return prompts.OBSERVATION.format(body=body)

    # ---- prompts -------------------------------------------------------------------------------
    @staticmethod
    def instructions(mode: str, feedback: bool = False) -> str:
        """System prompt for ``mode`` (seed 004's agent prompt, cut down to the tools the mode allows);
        with ``feedback`` the submit tool is described as answering with the failing tests."""
        if mode == "no-tools":
            return prompts.NO_TOOLS_SYSTEM
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        tools = ["search", "execute", "submit"] if mode == "multi-tool" else ["execute", "submit"]
        helps = {**prompts.TOOLS_HELP, **({"submit": prompts.SUBMIT_FEEDBACK_HELP} if feedback else {})}
        parts = [helps[t].format(n=i) for i, t in enumerate(tools, 1)]
        strategy = prompts.SEARCH_STRATEGY if mode == "multi-tool" else ""
        return prompts.TOOLS_SYSTEM.format(count=len(tools), tools="\n".join(parts), strategy=strategy)

    @staticmethod
    def task_message(task: CodeTask) -> str:
        return prompts.TASK.format(prompt=task.prompt.strip(), entry_point=task.entry_point)

    # ---- parsing -------------------------------------------------------------------------------
    @staticmethod
    def parse_text(text: str, mode: str) -> tuple[str, str, bool, str | None]:
        """(action, argument, valid, error for the model). Never raises, whatever ``text`` is."""
        try:
            return CodeEnvironment._parse(text, mode)
        except Exception as e:  # a parser bug must cost a turn, not the run
            return "invalid", "", False, f"the output could not be parsed ({type(e).__name__})"

    @staticmethod
    def _parse(text: str, mode: str) -> tuple[str, str, bool, str | None]:
        if mode not in MODES:
            return "invalid", "", False, f"unknown mode {mode!r}"
        if not isinstance(text, str) or not text.strip():
            return "invalid", "", False, "the output was empty"
        found = _first_action(text)
        if found is None:
            want = "a ```python code block" if mode == "no-tools" else "<search>, ```python or ```submit"
            return "invalid", "", False, f"no tool call was found; write {want}"
        kind, body, _ = found
        if kind == "search":
            if mode == "no-tools":
                return "invalid", "", False, "no tools here: write your whole solution in one ```python block"
            if mode != "multi-tool":
                return "invalid", "", False, "search is not available here; use ```python or ```submit"
            query = " ".join(body.split())
            if not query:
                return "invalid", "", False, "the search query was empty"
            if len(query) > MAX_QUERY_CHARS:
                return "invalid", "", False, f"the search query is longer than {MAX_QUERY_CHARS} characters"
            return "search", query, True, None
        code = body.strip("\n")
        if not code.strip():
            if kind == "submit" and mode != "no-tools":
                return "submit", "", True, None  # the code that last ran: CodeEnvironment.resolve_submit
            if kind == "plain":  # a bare ``` line is also the stop string: the turn ended at the opening fence
                return "invalid", "", False, (
                    "a bare ``` line ends your turn (it reads as a closing fence), so the block was empty: "
                    "open code with ```python, and quote errors or output without a fence"
                )
            return "invalid", "", False, "the code block was empty"
        if mode == "no-tools":
            if kind in _PYTHON_LANGS | {"submit", "plain"}:
                return "submit", code, True, None
            return "invalid", "", False, f"a ```{kind} block is not Python; write ```python"
        if kind == "submit":
            return "submit", code, True, None
        if kind in _PYTHON_LANGS:
            return "execute", code, True, None
        if kind == "plain":
            return (
                "invalid",
                "",
                False,
                "the code block needs a tag: ```python to run it, ```submit to submit",
            )
        return "invalid", "", False, f"only ```python blocks can run, not ```{kind}"

    # ---- tools ---------------------------------------------------------------------------------
    def run(self, action: str, argument: str) -> tuple[str, dict, bool]:
        """Execute one parsed action: (observation for the model, info, done)."""
        if action == "search":
            return self._search(argument)
        if action == "execute":
            res = run_python(argument, self.limits)
            self.executes += 1
            parts = [res.stdout.rstrip()] if res.stdout.strip() else []
            if res.error:
                parts.append(prompts.RUN_ERROR.format(error=res.error))
            body = "\n".join(parts) if parts else prompts.NO_OUTPUT
            info = {"ok": res.ok, "error": res.error}
            key = same_code(argument)
            if key in self.failed_runs:  # the same code raised before: it can only raise again
                info["repeat_of_run"] = self.failed_runs[key]
            elif res.error:
                self.failed_runs[key] = self.executes
            defines = self._defines_entry_point(argument)
            if defines and not self._stub(argument):  # a stub is not "the code that ran"
                self.last_run = argument
                self.runs.append((self.executes, argument))
            failed = self.failed.get(key) if self.feedback and self._option("flag_repeats") else None
            if failed is not None:  # a note, not part of the body: the agent truncates bodies, never notes
                info["note"] = prompts.RAN_FAILED_CODE.format(n=failed[0], failure=failed[1], name=self.task.entry_point)
                info["repeat_of"] = failed[0]
            elif self.submit_hint and res.ok and not res.error and defines:
                info["note"] = prompts.SUBMIT_HINT.format(name=self.task.entry_point)
            return truncate(body, OBSERVATION_CHARS), info, False
        if action == "submit":
            argument, error = self.resolve_submit(argument)
            if error:
                return prompts.INVALID_ACTION.format(error=error), {}, False
            res = run_tests(self.task, argument, self.test_limits)
            self.submitted, self.passed, self.last_result = argument, res.ok, res
            body = prompts.TESTS_PASSED if res.ok else prompts.TESTS_FAILED.format(error=res.error or "unknown error")
            info = {"passed": res.ok, "error": res.error, "sanitized": sanitized_away(self.task, argument)}
            return truncate(body, OBSERVATION_CHARS), info, True
        return prompts.INVALID_ACTION.format(error=argument or "unrecognised output"), {}, False

    def resolve_submit(self, code: str) -> tuple[str, str | None]:
        """(code to test, error): an empty submission, or one whose entry point has no body
        (``stub_submits_last_run``), means the last code that ran and defined the entry point; with
        none, the model must be told rather than have an empty program tested."""
        stub = bool(code.strip()) and self._stub(code)
        if code.strip() and not stub:
            return code, None
        if self.last_run is not None:
            return self.last_run, None
        return "", (prompts.STUB_SUBMIT if stub else prompts.EMPTY_SUBMIT).format(name=self.task.entry_point)

    def _defines_entry_point(self, code: str) -> bool:
        name = re.escape(self.task.entry_point)
        return re.search(rf"(?m)^\s*(async\s+)?def\s+{name}\s*\(|^\s*class\s+{name}\b", code) is not None

    def _search(self, query: str) -> tuple[str, dict, bool]:
        if self.docs_browser is None:
            return prompts.NO_DOCS, {"hits": []}, False
        try:
            hits = self.docs_browser.search(query, k=SEARCH_HITS)
        except Exception as e:  # a bad query must not end the episode
            return prompts.SEARCH_ERROR.format(error=e), {"hits": []}, False
        if not hits:
            return prompts.NO_DOCS_FOUND, {"hits": []}, False
        blocks = []
        for hit in hits:
            try:
                text = self.docs_browser.chunk_text(hit.chunk_id)
            except Exception:
                text = hit.snippet
            blocks.append(f"[{hit.title}]\n{truncate(text.strip(), HIT_CHARS)}")
        return truncate("\n\n".join(blocks), OBSERVATION_CHARS), {"hits": [h.chunk_id for h in hits]}, False


def entry_point_is_stub(code: str, name: str) -> bool:
    """Whether the last top-level definition of ``name`` in ``code`` has no body: only a docstring,
    ``pass`` or ``...``. Code that does not parse, or does not define ``name``, is no stub."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not defs:
        return False
    return all(isinstance(b, ast.Pass) or (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
               and (isinstance(b.value.value, str) or b.value.value is Ellipsis)) for b in defs[-1].body)


def same_code(code: str) -> str:
    """``code`` without blank lines and trailing spaces: two submissions that differ only so are one."""
    return "\n".join(ln.rstrip() for ln in code.splitlines() if ln.strip())


_UNITTEST_HEADER = re.compile(r"^(FAIL|ERROR): (\S+)", re.M)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")
MAX_FAILURES_SHOWN = 5
FAILURE_LINE_CHARS = 240


def failure_details(result: Any) -> str:
    """Which tests failed and each failure's last line (ToRL shows the model only the last line):
    the failing docstring examples (visible tests), unittest's FAIL/ERROR blocks by test name, else
    the error of the test script; bounded in length."""
    stderr = getattr(result, "stderr", "") or ""
    lines = [ln[len(EXAMPLE_FAILED):].strip() for ln in stderr.splitlines() if ln.startswith(EXAMPLE_FAILED)]
    for block in re.split(r"(?m)^={20,}$", stderr):
        head = _UNITTEST_HEADER.search(block)
        if head is None:
            continue
        body = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("-" * 20)]
        exc = [ln for ln in body if _EXCEPTION.match(ln)]
        why = exc[-1] if exc else (body[-1] if len(body) > 1 else "")
        lines.append(f"{head.group(2)}: {why}"[:FAILURE_LINE_CHARS])
    if not lines:
        return (getattr(result, "error", None) or "the tests failed")[:FAILURE_LINE_CHARS]
    more = len(lines) - MAX_FAILURES_SHOWN
    return "\n".join(lines[:MAX_FAILURES_SHOWN] + ([f"... and {more} more failing tests"] if more > 0 else []))


def task_gold(task: CodeTask) -> dict[str, Any]:
    """The gold record of a code trajectory; ``passed`` becomes True only when a submission passes."""
    return {"task_id": task.id, "source": task.source, "passed": False}


def used_calls(traj: Trajectory) -> int:
    """Search and execute calls that actually ran (refused ones do not count)."""
    return sum(1 for s in traj.steps if s.action in BUDGETED and not s.info.get("refused"))


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
