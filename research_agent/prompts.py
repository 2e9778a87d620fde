"""Every prompt string of the research agent, in one place.

Two templates (seed 003): "fast thinking" asks for the next action directly and is the default,
since explicit reasoning made small models less stable and less accurate; "slow thinking" asks for
a ``<think>`` block before each action.  Actions are plain-text tags because the small models'
``<tool_call>`` special tokens are untrained (DATA.md).
"""

from __future__ import annotations

TEMPLATES = ("fast", "slow")
CONTEXTS = ("full", "managed")

ACTION_HELP = """Actions (write exactly one action per turn):
<search>query</search> search the documents; results are shown with ids like [doc/id#2]
<open>id</open> read a document or a result by its id
<find>text</find> show the lines of the opened document that contain the text
<answer>short answer [id]</answer> give the final answer and cite the id of the result that supports it

Example:
Question: What is the capital of Peru?
<search>Peru capital</search>
<result>
[factbook/pe#0] Peru: Country: Peru Region: South America Capital: Lima Population: 32,600,249
</result>
<answer>Lima [factbook/pe#0]</answer>"""

# How research differs from one lookup (issue: the student searched once and answered from the
# snippets, so it got none of the two-hop questions); the reference demonstrations do exactly this.
RESEARCH_HINT = ("A question about something found on the way needs one search per step: find that thing first, "
                 "then search for it by name. When no result shows the answer, open the document and find its line.")

FAST_SYSTEM = f"""You are a research assistant that answers questions using a document collection.
{ACTION_HELP}
Do not explain. Search first, then answer with a short answer and its citation.
{RESEARCH_HINT}"""

SLOW_SYSTEM = f"""You are a research assistant that answers questions using a document collection.
{ACTION_HELP}
Before every action, think briefly inside <think>...</think>, then write the action.
Search first, then answer with a short answer and its citation.
{RESEARCH_HINT}"""

QUESTION = "Question: {question}"

# Case memory (B6): past cases shown before the question.  The header tells the model the cases
# are hints, not evidence, so it still searches and cites its own results.
MEMORY_HEADER = "Past cases of similar questions (hints only; search and cite your own results):"
MEMORY_CASE = "- Q: {question}\n  Steps: {steps}\n  Answer: {answer}"
MEMORY_WARNING = "- Failed before, do not repeat: Q: {question}\n  Steps: {steps}\n  Wrong answer: {answer}"

# Report mode (B8): the policy only proposes questions and writes prose; headings, citations and
# the sources list are assembled by code, so a small model still yields a well-formed report.
REPORT_PLAN = (
    "Topic: {topic}\n"
    "Write {n} short research questions that together cover this topic, one per line, nothing else."
)
REPORT_SECTION = (
    "Evidence:\n{evidence}\n\n"
    "Using only the evidence above, write two or three sentences that answer: {question}"
)
REPORT_SUMMARY = "Notes:\n{notes}\n\nSummarize these notes about {topic} in two sentences."

# Shown when the model's output holds no accepted action.
INVALID_ACTION = (
    "Invalid action: {reason}. Write exactly one of <search>query</search>, <open>id</open>, "
    "<find>text</find> or <answer>short answer [id]</answer>."
)
NO_CALLS_LEFT = "You have no tool calls left. Answer now with <answer>short answer [id]</answer>."
CALLS_LEFT = "({n} tool calls left)"
NO_RESULTS = "No results."
TOOL_ERROR = "Error: {message}"

OBSERVATION = "\n<result>\n{body}\n</result>\n"
TRUNCATED = " ...(truncated)"

# Managed context (B4): earlier turns are dropped from the prompt, so the model keeps its own notes.
# No "Question:" and no result tag here: the reference policy reads both from the transcript.
NOTES_HELP = """Earlier turns are not shown again: each turn you see the question, your notes and the last result.
Start every turn by rewriting your notes inside <notes>...</notes>: the facts found so far and the ids to cite,
e.g. <notes>Lima is the capital of Peru [factbook/pe#0]</notes>, then write the action."""
NOTES = "Your notes:\n<notes>{notes}</notes>"

STOP_STRINGS = ["</search>", "</open>", "</find>", "</answer>"]


def system_prompt(template: str) -> str:
    if template == "fast":
        return FAST_SYSTEM
    if template == "slow":
        return SLOW_SYSTEM
    raise ValueError(f"unknown template {template!r}; choose one of {TEMPLATES}")


def messages(question: str, template: str, guidance: str = "") -> list[dict[str, str]]:
    """Chat messages that open a trajectory; ``guidance`` carries e.g. retrieved past cases."""
    user = QUESTION.format(question=question)
    if guidance:
        user = f"{guidance}\n\n{user}"
    return [{"role": "system", "content": system_prompt(template)}, {"role": "user", "content": user}]


def managed_messages(question: str, template: str, notes: str, guidance: str = "") -> list[dict[str, str]]:
    """The fixed head of a managed-context prompt: the rules, the question and the running notes."""
    msgs = messages(question, template, guidance)
    msgs[0]["content"] += "\n" + NOTES_HELP
    if notes:
        msgs[1]["content"] += "\n\n" + NOTES.format(notes=notes)
    return msgs
