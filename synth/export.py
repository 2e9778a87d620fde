"""SFT records that other trainers (TRL's ``SFTTrainer`` and the like) can train on as the agent runs.

The agent never holds a chat of alternating assistant and tool messages.  Its token stream is the
chat-template prompt (the system prompt and the question, then the generation prompt) followed by
the model's turns with each observation appended inline, and no end-of-turn token anywhere after the
prompt (``research_agent.loop``).  A trainer handed one message per turn and a ``tool`` role learns a
format the agent never runs, so each record carries that stream itself: token ids rendered with the
student's tokenizer by the very function our own SFT trainer uses (``research_agent.tasks``), so
both trainers learn the same tokens, and chat ``messages`` whose rendering is the same text.

A managed-context trajectory has no single stream: each step's prompt was rebuilt from the question,
the notes and the last result.  Its record holds one tokenized example per step instead (rendered as
our trainer renders it, with the budgets the agent ran with), and no ``messages``, since no one
conversation was ever shown to the model.  docs/training.md ("SFT data for other trainers") gives the
fields.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from research_agent import prompts
from research_agent.agent import AgentConfig
from research_agent.context import encode_chat
from research_agent.tasks import render_example, render_managed
from research_agent.trajectory import Trajectory

IGNORE_INDEX = -100  # the label of a token left out of the loss (PyTorch's and TRL's convention)


def sft_record(traj: Trajectory, tokenizer: Any = None, tokenizer_name: str = "") -> dict[str, Any]:
    """One export line; without a tokenizer only the text fields (``turns``, ``messages``)."""
    record: dict[str, Any] = {"id": traj.id, "question": traj.question, "template": traj.meta.get("template", "fast"),
                              "answers": traj.gold.get("answers", []),
                              "turns": [{"completion": s.completion, "observation": s.observation}
                                        for s in traj.steps]}
    if traj.managed:
        record["context"] = "managed"
        if tokenizer is not None:
            record["tokenizer"] = tokenizer_name
            record["examples"] = managed_examples(tokenizer, record, traj)
        return record
    record["messages"], record["assistant_spans"] = stream_messages(record)
    if tokenizer is not None:
        record["tokenizer"] = tokenizer_name
        record.update(stream_tokens(tokenizer, record))
    return record


def stream_messages(record: dict) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The agent's opening messages, then one assistant message holding the whole stream as text.

    One message because the stream has no turn boundaries: a second assistant message would add
    the template's end-of-turn and header tokens the agent never saw.  The spans say which parts of
    that message are the model's (trained) and which are observations (not trained); their texts
    joined are the message.
    """
    spans = []
    for turn in record["turns"]:
        spans.append({"text": turn["completion"], "train": True})
        if turn.get("observation"):
            spans.append({"text": turn["observation"], "train": False})
    spans = [s for s in spans if s["text"]]
    msgs = prompts.messages(record["question"], record["template"])
    msgs.append({"role": "assistant", "content": "".join(s["text"] for s in spans)})
    return msgs, spans


def stream_tokens(tok, record: dict) -> dict[str, Any]:
    """The stream in the student's tokens, split where the prompt ends; {} when it holds no model token."""
    rendered = render_example(tok, record, max_tokens=sys.maxsize)  # the other trainer sets its own max_length
    if rendered is None:
        return {}
    ids, mask = rendered
    prompt = encode_chat(tok, prompts.messages(record["question"], record["template"]))
    if ids[: len(prompt)] != prompt:  # render_example and the agent open the stream differently
        raise ValueError(f"record {record['id']!r}: the rendered stream does not start with the agent's prompt")
    fields = tokenized(prompt, ids[len(prompt):], mask[len(prompt):])
    fields["messages_round_trip"] = chat_ids(tok, record["messages"]) == fields["input_ids"]
    return fields


def managed_examples(tok, record: dict, traj: Trajectory) -> list[dict[str, Any]]:
    """One tokenized example per step, each prompt rebuilt with the budgets the agent ran with."""
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    ran = {k: v for k, v in (traj.meta.get("config") or {}).items() if k in known}
    cfg = AgentConfig(**{**ran, "context": "managed"})
    out = []
    for ids, mask in render_managed(tok, record, None, cfg):
        start = mask.index(1)  # a step's example is its prompt (0s), then its completion (1s)
        out.append(tokenized(ids[:start], ids[start:], mask[start:]))
    return out


def tokenized(prompt: list[int], completion: list[int], mask: list[int]) -> dict[str, Any]:
    """The fields of one example, named as TRL names them.

    ``prompt_ids`` / ``completion_ids`` are the prompt-completion split, ``completion_mask`` runs
    along the completion; ``input_ids`` and ``labels`` (-100 off the loss) are what TRL 1.16's
    SFTTrainer reads as a pre-tokenized dataset, labels as they are, so it masks the prompt and the
    observations with no option set (its own ``completion_mask`` would run along ``input_ids``; it
    ignores the column once ``labels`` is there).
    """
    return {"prompt_ids": list(prompt), "completion_ids": list(completion), "completion_mask": list(mask),
            "input_ids": list(prompt) + list(completion),
            "labels": [IGNORE_INDEX] * len(prompt) + [t if m else IGNORE_INDEX for t, m in zip(completion, mask,
                                                                                               strict=True)]}


def chat_ids(tok, messages: list[dict[str, str]]) -> list[int] | None:
    """``messages`` through the chat template, the last message continued (no end-of-turn appended);
    None when the template cannot continue a message."""
    try:
        ids = tok.apply_chat_template(messages, tokenize=True, continue_final_message=True)
    except ValueError:  # the template drops or rewrites the final message
        return None
    if hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)
