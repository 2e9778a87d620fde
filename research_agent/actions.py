"""Parse a model turn into one action; never raise.

Small models emit unclosed tags, several actions, empty arguments, or prose.  Each of those
becomes an ``Action`` with ``valid=False`` and a reason the agent shows the model, so a bad turn
costs a turn, not the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ACTION_TAGS = ("search", "open", "find", "answer")
_TAG = re.compile(r"<(search|open|find|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_OPEN_ANSWER = re.compile(r"<answer>(.*)$", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
# Citations look like [factbook/fr#3] or [wiki/Paris#0] or [https://example.org/page#0].
CITATION = re.compile(r"\[([^\[\]\s]+#\d+)\]")
MAX_ARGUMENT_CHARS = 1000


@dataclass
class Action:
    name: str  # search | open | find | answer | invalid
    argument: str = ""
    valid: bool = True
    reason: str = ""  # why it is invalid
    thought: str = ""
    citations: list[str] = field(default_factory=list)


def strip_citations(text: str) -> str:
    return re.sub(r"\s+", " ", CITATION.sub("", text)).strip(" .;,")


def parse_action(text: str, finished: bool = True) -> Action:
    """Return the first complete action in ``text``.

    ``finished`` says generation ended on EOS or length rather than a stop string; then an
    ``<answer>`` left unclosed is still accepted, because the model clearly meant to answer.
    """
    if not isinstance(text, str):
        return Action("invalid", valid=False, reason="the output was not text")
    thought = "\n".join(m.strip() for m in _THINK.findall(text))
    match = _TAG.search(text)
    if match is None:
        opened = _OPEN_ANSWER.search(text)
        if opened and finished and opened.group(1).strip():
            return _make("answer", opened.group(1), thought)
        if re.search(r"<(search|open|find|answer)>", text, re.IGNORECASE):
            return Action("invalid", valid=False, reason="an action tag was opened but never closed",
                          thought=thought)
        if not text.strip():
            return Action("invalid", valid=False, reason="the output was empty", thought=thought)
        return Action("invalid", valid=False, reason="no action tag was found", thought=thought)
    return _make(match.group(1).lower(), match.group(2), thought)


def _make(name: str, raw: str, thought: str) -> Action:
    argument = raw.strip()
    if not argument:
        return Action("invalid", valid=False, reason=f"<{name}> was empty", thought=thought)
    if len(argument) > MAX_ARGUMENT_CHARS:
        return Action("invalid", valid=False,
                      reason=f"<{name}> argument is longer than {MAX_ARGUMENT_CHARS} characters", thought=thought)
    if name == "answer":
        cites = list(dict.fromkeys(CITATION.findall(argument)))
        return Action("answer", strip_citations(argument) or argument, thought=thought, citations=cites)
    if name == "open":
        argument = argument.strip("[]")
    return Action(name, argument, thought=thought)
