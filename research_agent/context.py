"""Managed context (B4, Tongyi DeepResearch / IterResearch): rebuild each step's prompt from state.

In full mode the prompt is the whole transcript, so a long research outgrows a small model's window
and buries early evidence.  In managed mode every step sees only: the rules, the question, the
model's running notes and its last action with that action's result.  The prompt is rebuilt from
those parts each step and cut to fit ``context_tokens``, so step 30 costs what step 2 does.

Design: the notes are written by the policy in the same turn as its action (``<notes>...</notes>``
then the action), not in a separate note-taking generation.  Reasons, for small models such as
smollm2-135m in particular:

* One generation per step, as in full mode: CPU rollouts cost the same, and each step is exactly
  one (prompt, completion) pair, so the trainer gives the notes the same advantage as the action
  they led to — the policy learns what was worth remembering from the outcome.
* The action part of a turn keeps the format the model already knows (the same tags, stop strings
  and parser as full mode), and the last turn is shown as in a full transcript, so an adapter trained
  in full mode still reads a managed prompt.  Notes are optional: a turn without a notes block keeps
  the previous notes, so an untrained small model that never writes notes degrades to "question +
  last result" instead of breaking; priming a notes block would instead make every turn of such a
  model fail to reach an action.
* Notes are cut to ``notes_tokens`` whatever the model writes, so a rambling small model cannot
  crowd out the evidence.

Everything here is a pure function of texts, so the agent (live) and the SFT renderer (exported
text, the student's tokenizer) build the same prompt from the same turns.
"""

from __future__ import annotations

import re

from . import prompts

_NOTES = re.compile(r"<notes>(.*?)(?:</notes>|(?=<(?:search|open|find|answer|think)>)|\Z)", re.DOTALL | re.IGNORECASE)
_CALLS_NOTE = re.compile("^(?:" + re.escape(prompts.NO_CALLS_LEFT) + "|"
                         + re.escape(prompts.CALLS_LEFT).replace(r"\{n\}", r"\d+") + ")$")
_OPEN, _CLOSE = prompts.OBSERVATION.split("{body}")


class ContextBudgetError(ValueError):
    """The fixed part of a managed prompt (rules + question) does not fit ``context_tokens``."""


def written_notes(completion: str) -> str | None:
    """The notes a turn wrote (the last block), or None when it wrote none."""
    found = _NOTES.findall(completion or "")
    return found[-1].strip() if found else None


def strip_notes(completion: str) -> str:
    """The turn without its notes: what is parsed as the action and shown as the last turn."""
    return _NOTES.sub("", completion or "").replace("</notes>", "").strip()


def running_notes(completions: list[str]) -> str:
    """The most recent notes written so far; a turn without notes keeps the earlier ones."""
    for text in reversed(completions):
        notes = written_notes(text)
        if notes is not None:
            return notes
    return ""


def split_observation(observation: str) -> tuple[str, str]:
    """(body, tool-call note) of an observation, so the body can be cut and the note never is."""
    inner = observation.removeprefix(_OPEN).removesuffix(_CLOSE) if observation else ""
    head, _, last = inner.rpartition("\n")
    if _CALLS_NOTE.match(last):
        return head, last
    if _CALLS_NOTE.match(inner):
        return "", inner
    return inner, ""


def encode_chat(tok, msgs: list[dict[str, str]]) -> list[int]:
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def _encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False) if text else []


def _cut(tok, text: str, ids: list[int], keep: int, marker: str = "") -> str:
    """``text`` itself when nothing is cut (decoding may not round-trip), else its first ``keep`` tokens."""
    return text if keep >= len(ids) else tok.decode(ids[:keep]) + marker


def managed_prompt(tok, question: str, completions: list[str], observations: list[str], *, template: str,
                   context_tokens: int, notes_tokens: int, reserve: int, guidance: str = "") -> list[int]:
    """Token ids of the next step's prompt, at most ``context_tokens - reserve`` long.

    ``completions`` and ``observations`` are the texts of the turns so far.  When the parts do not
    fit, the last result's body is cut first (its tool-call note is kept: the model must still learn
    that it has to answer), then the notes, then the shown last action.
    """
    limit = context_tokens - reserve
    notes = running_notes(completions)
    notes_ids = _encode(tok, notes)
    if len(notes_ids) > notes_tokens:  # the notes' own bound, whatever room there is
        notes_ids = notes_ids[:notes_tokens]
        notes = tok.decode(notes_ids)
    action = strip_notes(completions[-1]) if completions else ""
    action_ids = _encode(tok, action)
    last_obs = observations[-1] if observations else ""
    body, note = split_observation(last_obs)
    body_ids = _encode(tok, body)
    keep = {"body": len(body_ids), "notes": len(notes_ids), "action": len(action_ids)}

    def render() -> list[int]:
        shown_notes = _cut(tok, notes, notes_ids, keep["notes"])
        head = encode_chat(tok, prompts.managed_messages(question, template, shown_notes, guidance))
        if not completions:
            return head
        ids = head + _encode(tok, _cut(tok, action, action_ids, keep["action"]))
        if last_obs:
            shown = _cut(tok, body, body_ids, keep["body"], prompts.TRUNCATED)
            ids += _encode(tok, prompts.OBSERVATION.format(body="\n".join(x for x in (shown, note) if x)))
        return ids

    ids = render()
    for part in ("body", "notes", "action"):
        while len(ids) > limit and keep[part] > 0:
            keep[part] = max(0, keep[part] - (len(ids) - limit))
            ids = render()
    if len(ids) > limit:
        raise ContextBudgetError(
            f"context_tokens={context_tokens} leaves {limit} prompt tokens after {reserve} for the turn, but the "
            f"rules and the question alone take {len(ids)}; raise context_tokens")
    return ids
