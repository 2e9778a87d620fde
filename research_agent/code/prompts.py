"""Every prompt string of the code agent, in one place (the research agent's are ``research_agent.prompts``).

The tools are seed 004's, as plain text: ``<search>`` for API documentation, a ```python block to run
code, a ```submit block to have the task's tests run on the solution.
"""

from __future__ import annotations

NO_TOOLS_SYSTEM = (
    "You are a Python expert. Solve the task by writing the complete solution in one "
    "```python code block. Do not write anything after the code block."
)

TOOLS_HELP = {
    "search": "1. Search documentation, when you are unsure about an API:\n<search>your query</search>\n"
    "Example: <search>Counter most_common</search>",
    "execute": "{n}. Execute code, to test ideas or inspect results (you see stdout and the error's last line):\n"
    "```python\n# your code\nprint(result)\n```",
    "submit": "{n}. Submit your final solution to be tested (this ends the task):\n"
    "```submit\ndef your_solution(...):\n    ...\n```",
}
# With test feedback (the default), the seed's "run tests" tool: a failing submission is answered.
SUBMIT_FEEDBACK_HELP = (
    "{n}. Submit your solution to be tested: you see PASS, or FAIL with the failing tests, and can fix "
    "it and submit again:\n```submit\ndef your_solution(...):\n    ...\n```"
)
TOOLS_SYSTEM = (
    "You are a Python expert. You have {count} tools available:\n{tools}\nWrite exactly one tool call per turn. "
    "{strategy}Test your code with ```python before submitting with ```submit. You can use tools in any order "
    "and multiple times. Each run starts fresh: include imports and definitions every time."
)
SEARCH_STRATEGY = "Strategy: search the docs BEFORE writing code if you are unsure about an API. "
TASK = "{prompt}\n\nThe tests call `{entry_point}`."

# After a clean run that defines the entry point. Untrained instruct models (qwen2.5-coder-0.5b,
# code-only, first 49 test tasks) ran a working solution, saw it work and ran it again until the budget
# was gone: 43 % never submitted. The note names the next step without judging the code.
# The same model then wrote an empty ```submit block, meaning "submit that": it submits the last code
# that ran and defined the entry point, as a stateful submit tool does.
SUBMIT_HINT = (
    "The code ran without errors. If `{name}` does what the task asks, submit it: an empty ```submit "
    "block submits the code you last ran."
)

# Observations: inline (appended to the model's own turn) or inside the chat template's user turn.
OBSERVATION = "\n<result>\n{body}\n</result>\n"
CHAT_OBSERVATION = "{before}<result>\n{body}\n</result>{after}"
NO_CALLS_LEFT = "You have no tool calls left. Submit your solution now with ```submit."
LAST_TURN = "This is your last turn: submit your solution now with ```submit."
CALLS_LEFT = "({n} tool calls left)"

# Tool results.
NO_OUTPUT = "(no output)"
RUN_ERROR = "Error: {error}"
TESTS_PASSED = "All tests passed."
TESTS_FAILED = "Tests failed: {error}"
TESTS_FAIL = "FAIL:\n{details}\nFix your code and submit again."
# A ```submit block holding only the entry point's signature and docstring: the code that last ran.
STUB_SUBMITTED = "Your ```submit block had `{name}` without a body, so the code you last ran was submitted."
STUB_SUBMIT = (
    "the ```submit block defines `{name}` without a body (its signature and docstring only) and no code "
    "defining `{name}` has run yet; write the whole function inside the block"
)
# The same code as a failed submission, submitted or run again (greedy models repeat it unchanged).
SAME_AS_FAILED = "This is the same code as your submission {n}, which failed."
RAN_FAILED_CODE = (
    "This is the code of your submission {n}, which failed: {failure}\nChange `{name}` so that it passes "
    "before you submit again."
)
# A failed submission after a run whose code passes those examples (qwen ran the right code, then
# submitted another body): that code becomes what an empty block submits.
RUN_PASSES_EXAMPLES = (
    "The code of your run {n} passes these examples: an empty ```submit block submits it."
)
# With visible tests (HumanEval: the docstring's examples) the verdict never speaks for the hidden tests.
EXAMPLES_PASSED = "PASS: the examples in the task pass. Submission accepted."
SUBMITTED_NO_EXAMPLES = "Submitted: this task has no examples to check, so the submission is final."
INVALID_ACTION = "Invalid action: {error}"
NO_DOCS = "Documentation search is not available."
NO_DOCS_FOUND = "No documentation found. Try different keywords."
SEARCH_ERROR = "Search error: {error}"
EMPTY_SUBMIT = (
    "the ```submit block was empty and no code defining `{name}` has run yet; write your solution inside the block"
)
