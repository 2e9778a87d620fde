"""``parse_action`` is linear in the turn's length and gives what the regex parser it replaced gave
(issue 30: 160 KB of unclosed ``<search>`` took 27 s)."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from research_agent.actions import Action, _make, parse_action

# The parser as it was (quadratic in unclosed tags), kept as the reference for equivalence.
_TAG = re.compile(r"<(search|open|find|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_OPEN_ANSWER = re.compile(r"<answer>(.*)$", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)


def reference_parse_action(text: str, finished: bool = True) -> Action:
    if not isinstance(text, str):
        return Action("invalid", valid=False, reason="the output was not text")
    thought = "\n".join(m.strip() for m in _THINK.findall(text))
    match = _TAG.search(text)
    if match is None:
        opened = _OPEN_ANSWER.search(text)
        if opened and finished and opened.group(1).strip():
            return _make("answer", opened.group(1), thought)
        if re.search(r"<(search|open|find|answer)>", text, re.IGNORECASE):
            return Action(
                "invalid", valid=False, reason="an action tag was opened but never closed", thought=thought
            )
        if not text.strip():
            return Action("invalid", valid=False, reason="the output was empty", thought=thought)
        return Action("invalid", valid=False, reason="no action tag was found", thought=thought)
    return _make(match.group(1).lower(), match.group(2), thought)


def test_unclosed_tags_parse_in_linear_time():
    for tag in ("<search>", "<think>", "<Open>", "<search><open><find><answer", "</search><search>"):
        text = tag * (200_000 // len(tag))
        t0 = time.perf_counter()
        parse_action(text)
        parse_action(text, finished=False)
        assert time.perf_counter() - t0 < 0.5, tag  # was 28 s for 80 KB of <search> alone
    text = "<search>" * 25_000 + "<answer>Paris</answer>"
    t0 = time.perf_counter()
    assert parse_action(text).argument == "Paris"
    assert time.perf_counter() - t0 < 0.5


_PIECES = [
    "<search>",
    "</search>",
    "<open>",
    "</open>",
    "<find>",
    "</find>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<SEARCH>",
    "</Search>",
    "<Answer>",
    "</ANSWER>",
    "<THINK>",
    "</think >",
    "<search",
    "search>",
    "</",
    "<",
    ">",
    "[factbook/fr#0]",
    "[wiki/Paris#12]",
    "[",
    "]",
    "#3",
    " ",
    "\n",
    "  \t",
    "Paris",
    "x",
    "capital of France",
    "é",
    "\u2028",
]
_turns = st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=25).map("".join)


@settings(max_examples=100, deadline=None)
@given(text=_turns, finished=st.booleans())
def test_same_results_as_the_regex_parser_on_tag_soup(text, finished):
    assert parse_action(text, finished) == reference_parse_action(text, finished)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=400), finished=st.booleans())
def test_never_raises_and_agrees_on_random_text(text, finished):
    a = parse_action(text, finished)
    assert a.name in ("search", "open", "find", "answer", "invalid") and a.valid == (a.name != "invalid")
    assert a == reference_parse_action(text, finished)


def test_long_arguments_and_non_text_stay_invalid():
    assert parse_action("<search>" + "x" * 1001 + "</search>").reason.endswith("longer than 1000 characters")
    assert parse_action(None).reason == "the output was not text"
    assert parse_action(b"<search>x</search>").reason == "the output was not text"
