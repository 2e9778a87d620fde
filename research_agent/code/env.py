"""The code environment: the seed's three tools (search docs, execute, submit) behind one parse/run pair.

The agent loop generates one turn until a stop string, calls ``parse`` on it, then ``run`` on the
action; the observation goes back to the model (the loop wraps and token-truncates it, and masks
it out of the loss). Actions are plain text, as in the research agent and the seed (004):

    <search>pandas groupby mean</search>        look up API documentation
    ```python\\n...\\n```                          run code, see stdout and the error's last line
    ```submit\\n...\\n```                          run the task's tests on the solution; ends the episode

Generation of one turn stops at ``</search>`` or at a code block's closing fence ("\\n```\\n"), so a
turn holds at most one action; an opening fence with a language (```python) never matches the stop
string, but a bare ``` line does: such a turn ends at its opening fence, and the model is told so.
The agent loop can instead continue a turn that stopped at a bare fence or at the end of a bare block
(a quoted error; ``turn_continues``, ``CodeAgentConfig.continue_quotes``, off by default), and then
a tagged block after the quote is the action. Some backends (vLLM) drop the stop string from the
output: the endpoint policy puts back the one the server names (vLLM's ``stop_reason``), and a final
block or tag left unclosed is accepted as if closed.
"""

from __future__ import annotations

import re
from typing import Any

from research_agent.code.sandbox import DEFAULT_LIMITS, TEST_LIMITS, SandboxLimits, run_python, truncate
from research_agent.code.tasks import CodeTask, run_tests, sanitized_away

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

TOOLS_HELP = {
    "search": "1. Search documentation, when you are unsure about an API:\n<search>your query</search>\n"
    "Example: <search>Counter most_common</search>",
    "execute": "{n}. Execute code, to test ideas or inspect results (you see stdout and the error's last line):\n"
    "```python\n# your code\nprint(result)\n```",
    "submit": "{n}. Submit your final solution to be tested (this ends the task):\n"
    "```submit\ndef your_solution(...):\n    ...\n```",
}


# After a clean run that defines the entry point. Untrained instruct models (qwen2.5-coder-0.5b,
# code-only, first 49 test tasks) ran a working solution, saw it work and ran it again until the budget
# was gone: 43 % never submitted. The note names the next step without judging the code.
# The same model then wrote an empty ```submit block, meaning "submit that": it submits the last code
# that ran and defined the entry point, as a stateful submit tool does.
SUBMIT_HINT = (
    "The code ran without errors. If `{name}` does what the task asks, submit it: an empty ```submit "
    "block submits the code you last ran."
)


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


def turn_continues(text: str, mode: str) -> bool:
    """Did this turn stop at a ``` line that does not end an action, so generation should go on?

    The stop string "\n```\n" also matches a bare opening fence and the close of a bare block, which
    in the tool modes is a quote, not an action (smollm2 after code SFT wrote "The error is:\n```\n"
    three turns running, each one cut at its opening fence). A backend can only stop at a substring,
    so the agent loop (with ``continue_quotes``) asks this and continues the turn. In no-tools a
    closed bare block is the answer.
    """
    if not text.endswith("```\n") or _SEARCH.search(text):
        return False
    blocks = _fences(text)
    if not blocks or any(kind != "plain" for kind, _, _, _ in blocks):
        return False
    return not blocks[-1][3] or mode != "no-tools"


class CodeEnvironment:
    """One task's episode: parses the model's turns and runs its tools in the sandbox."""

    STOP_STRINGS: list[str] = ["</search>", "\n```\n"]

    def __init__(
        self,
        task: CodeTask,
        docs_browser: Any = None,
        limits: SandboxLimits = DEFAULT_LIMITS,
        test_limits: SandboxLimits = TEST_LIMITS,
        submit_hint: bool = True,
    ):
        self.task = task
        self.submit_hint = submit_hint
        self.docs_browser = docs_browser
        self.limits = limits  # execute
        self.test_limits = test_limits  # submit: the task's tests
        self.submitted: str | None = None
        self.last_run: str | None = None  # the last executed code that defines the entry point
        self.passed = False

    # ---- prompts -------------------------------------------------------------------------------
    @staticmethod
    def instructions(mode: str) -> str:
        """System prompt for ``mode`` (seed 004's agent prompt, cut down to the tools the mode allows)."""
        if mode == "no-tools":
            return (
                "You are a Python expert. Solve the task by writing the complete solution in one "
                "```python code block. Do not write anything after the code block."
            )
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        tools = ["search", "execute", "submit"] if mode == "multi-tool" else ["execute", "submit"]
        parts = [TOOLS_HELP[t].format(n=i) for i, t in enumerate(tools, 1)]
        strategy = (
            "Strategy: search the docs BEFORE writing code if you are unsure about an API. "
            if mode == "multi-tool"
            else ""
        )
        return (
            f"You are a Python expert. You have {len(tools)} tools available:\n"
            + "\n".join(parts)
            + f"\nWrite exactly one tool call per turn. {strategy}Test your code with ```python "
            "before submitting with ```submit. You can use tools in any order and multiple times. "
            "Each run starts fresh: include imports and definitions every time."
        )

    @staticmethod
    def task_message(task: CodeTask) -> str:
        return f"{task.prompt.strip()}\n\nThe tests call `{task.entry_point}`."

    # ---- parsing -------------------------------------------------------------------------------
    @staticmethod
    def parse(text: str, mode: str) -> tuple[str, str, bool, str | None]:
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
            parts = [res.stdout.rstrip()] if res.stdout.strip() else []
            if res.error:
                parts.append(f"Error: {res.error}")
            body = "\n".join(parts) if parts else "(no output)"
            info = {"ok": res.ok, "error": res.error}
            defines = self._defines_entry_point(argument)
            if defines:
                self.last_run = argument
            if self.submit_hint and res.ok and not res.error and defines:
                # a note, not part of the body: the agent truncates bodies, never notes
                info["note"] = SUBMIT_HINT.format(name=self.task.entry_point)
            return truncate(body, OBSERVATION_CHARS), info, False
        if action == "submit":
            argument, error = self.resolve_submit(argument)
            if error:
                return f"Invalid action: {error}", {}, False
            res = run_tests(self.task, argument, self.test_limits)
            self.submitted, self.passed = argument, res.ok
            body = "All tests passed." if res.ok else f"Tests failed: {res.error or 'unknown error'}"
            info = {"passed": res.ok, "error": res.error, "sanitized": sanitized_away(self.task, argument)}
            return truncate(body, OBSERVATION_CHARS), info, True
        return f"Invalid action: {argument or 'unrecognised output'}", {}, False

    def resolve_submit(self, code: str) -> tuple[str, str | None]:
        """(code to test, error): an empty submission means the last code that ran and defined the
        entry point; with none, the model must be told rather than have an empty program tested."""
        if code.strip():
            return code, None
        if self.last_run is not None:
            return self.last_run, None
        return "", (
            f"the ```submit block was empty and no code defining `{self.task.entry_point}` has run yet; "
            "write your solution inside the block"
        )

    def _defines_entry_point(self, code: str) -> bool:
        name = re.escape(self.task.entry_point)
        return re.search(rf"(?m)^\s*(async\s+)?def\s+{name}\s*\(|^\s*class\s+{name}\b", code) is not None

    def _search(self, query: str) -> tuple[str, dict, bool]:
        if self.docs_browser is None:
            return "Documentation search is not available.", {"hits": []}, False
        try:
            hits = self.docs_browser.search(query, k=SEARCH_HITS)
        except Exception as e:  # a bad query must not end the episode
            return f"Search error: {e}", {"hits": []}, False
        if not hits:
            return "No documentation found. Try different keywords.", {"hits": []}, False
        blocks = []
        for hit in hits:
            try:
                text = self.docs_browser.chunk_text(hit.chunk_id)
            except Exception:
                text = hit.snippet
            blocks.append(f"[{hit.title}]\n{truncate(text.strip(), HIT_CHARS)}")
        return truncate("\n\n".join(blocks), OBSERVATION_CHARS), {"hits": [h.chunk_id for h in hits]}, False
