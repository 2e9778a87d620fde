"""The trajectory record: the one contract between agent, rewards, synthesis, trainer and eval.

A trajectory is kept as one token stream (Search-R1 style): the prompt, then the model's own tokens
interleaved with tool observations.  ``token_mask`` marks which tokens the model produced, so the
trainer puts loss only on them and never on retrieved text.  With managed context (B4) the model
does not see that stream: each step's prompt is rebuilt, so each step also keeps the exact prompt
ids it was given, and the trainer learns from (step prompt, step completion) pairs instead.
Everything a reward needs (the answer,
the citations, the text of every chunk the agent saw) travels inside the record, so ``rewards/``
never has to touch a corpus or a model.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1

# Actions a step can carry.  "invalid" is a turn whose output parsed as no action (SimpleTIR's
# "void turn" when it also has no answer); "answer" ends the trajectory.
ACTIONS = ("search", "open", "find", "answer", "invalid", "execute", "submit")
TOOL_ACTIONS = ("search", "open", "find", "execute", "submit")


def _plain(record, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A record's fields as a dict that shares nothing with it.  ``dataclasses.asdict`` recurses into
    every token id of every list (thousands per record: a fifth of a trajectory-writing run's time);
    the id, log-prob and citation lists hold numbers or strings only, so a list copy is a full copy."""
    d = {}
    for f in fields(record):
        if f.name in skip:  # the caller fills it in, in its place
            d[f.name] = None
            continue
        v = getattr(record, f.name)
        if isinstance(v, list) and (not v or isinstance(v[0], (int, float, str))):
            d[f.name] = list(v)
        elif isinstance(v, (list, dict)):
            d[f.name] = copy.deepcopy(v)
        else:
            d[f.name] = v
    return d


@dataclass
class Step:
    """One policy turn: what the model wrote, what it asked for, and what came back."""

    action: str
    argument: str = ""
    completion: str = ""  # the model's raw text for this turn
    observation: str = ""  # what the environment returned (empty for answers)
    valid: bool = True  # False when the output did not parse as an accepted action
    error: str | None = None  # parse or tool error shown to the model
    completion_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    observation_ids: list[int] = field(default_factory=list)
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # hits, opened doc id, code result ...
    # managed context only: the exact prompt this turn was generated from (empty in full mode,
    # where the prompt is the trajectory's stream up to this turn)
    prompt_ids: list[int] = field(default_factory=list)


@dataclass
class Trajectory:
    """A whole research (or code) episode for one question."""

    question: str
    id: str = ""
    gold: dict[str, Any] = field(default_factory=dict)  # answers, rubrics, supporting chunks, tests
    steps: list[Step] = field(default_factory=list)
    answer: str | None = None
    citations: list[str] = field(default_factory=list)  # chunk ids cited by the answer
    # chunk id -> text, for every chunk the agent saw (search snippets and opened passages).
    retrieved: dict[str, str] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # everything after the prompt
    token_mask: list[int] = field(default_factory=list)  # 1 = model token, 0 = observation
    logprobs: list[float] = field(default_factory=list)  # per token_ids; 0.0 for observations
    stop_reason: str = ""  # answer | max_turns | max_tokens | error
    meta: dict[str, Any] = field(default_factory=dict)  # template, model, task type, timings ...
    schema_version: int = SCHEMA_VERSION

    # ---- counts used by rewards, filters and eval -------------------------------------------
    def count(self, action: str) -> int:
        return sum(1 for s in self.steps if s.action == action)

    @property
    def tool_calls(self) -> int:
        return sum(1 for s in self.steps if s.action in TOOL_ACTIONS)

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def answered(self) -> bool:
        return self.answer is not None and self.answer.strip() != ""

    @property
    def has_void_turn(self) -> bool:
        """A turn with neither a valid action nor an answer (SimpleTIR)."""
        return any(not s.valid for s in self.steps)

    @property
    def generated_tokens(self) -> int:
        return sum(self.token_mask)

    @property
    def managed(self) -> bool:
        """Each step was generated from its own rebuilt prompt (managed context)."""
        return any(s.prompt_ids for s in self.steps)

    def sequences(self) -> list[tuple[list[int], list[int]]]:
        """(token ids, loss mask) pairs exactly as the model saw them; mask 1 = the model's tokens.

        Full context: one sequence, the prompt and the whole stream.  Managed context: one sequence
        per step, that step's prompt and its completion, since no single stream was ever seen.
        """
        if not self.managed:
            return [(self.prompt_ids + self.token_ids, [0] * len(self.prompt_ids) + self.token_mask)]
        return [(s.prompt_ids + s.completion_ids, [0] * len(s.prompt_ids) + [1] * len(s.completion_ids))
                for s in self.steps if s.completion_ids]

    # ---- the token stream: written here and nowhere else ----------------------------------------
    def append_turn(self, step: Step) -> None:
        """Add a policy turn: its tokens enter the stream as the model's own (mask 1, their log-probs)."""
        self.steps.append(step)
        self.token_ids += step.completion_ids
        self.token_mask += [1] * len(step.completion_ids)
        self.logprobs += step.completion_logprobs

    def append_observation(self, step: Step, text: str, ids: list[int]) -> None:
        """Add what the environment returned for ``step``: in the stream, masked out of the loss."""
        step.observation = text
        step.observation_ids = list(ids)
        self.token_ids += step.observation_ids
        self.token_mask += [0] * len(step.observation_ids)
        self.logprobs += [0.0] * len(step.observation_ids)

    # ---- serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Empty step prompts are left out, so full-context records are unchanged by managed context."""
        d = _plain(self, skip=("steps",))
        d["steps"] = [_plain(s) for s in self.steps]
        for s in d["steps"]:
            if not s["prompt_ids"]:
                del s["prompt_ids"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"trajectory schema {version} is newer than this code understands ({SCHEMA_VERSION}); "
                "upgrade research-agent"
            )
        data = dict(data)
        steps = [Step(**s) for s in data.pop("steps", [])]
        known = {f for f in cls.__dataclass_fields__}
        return cls(steps=steps, **{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        return cls.from_dict(json.loads(line))

    def check_consistency(self) -> None:
        """Raise ValueError if the token stream and the steps disagree."""
        n = len(self.token_ids)
        if len(self.token_mask) != n or len(self.logprobs) != n:
            raise ValueError("token_ids, token_mask and logprobs differ in length")
        model = sum(len(s.completion_ids) for s in self.steps)
        obs = sum(len(s.observation_ids) for s in self.steps)
        if model != sum(self.token_mask) or model + obs != n:
            raise ValueError(
                f"token mask covers {sum(self.token_mask)} model tokens, steps hold {model} model + {obs} "
                f"observation tokens, stream has {n}"
            )
        if self.managed:
            self._check_managed()

    def _check_managed(self) -> None:
        """Every step has its own prompt within the window; the stream is the steps in order."""
        missing = [i for i, s in enumerate(self.steps) if not s.prompt_ids]
        if missing:
            raise ValueError(f"managed trajectory: steps {missing} have no prompt_ids")
        if self.steps[0].prompt_ids != self.prompt_ids:
            raise ValueError("managed trajectory: the first step's prompt is not the trajectory's prompt")
        stream, mask = [], []
        for s in self.steps:
            if len(s.completion_logprobs) != len(s.completion_ids):
                raise ValueError("managed trajectory: a step's completion ids and log-probs differ in length")
            stream += s.completion_ids + s.observation_ids
            mask += [1] * len(s.completion_ids) + [0] * len(s.observation_ids)
        if stream != self.token_ids or mask != self.token_mask:
            raise ValueError("managed trajectory: the token stream is not the steps' completions and observations")
        window = (self.meta.get("config") or {}).get("context_tokens")
        for i, s in enumerate(self.steps):
            if window and len(s.prompt_ids) + len(s.completion_ids) > window:
                raise ValueError(f"managed trajectory: step {i} holds {len(s.prompt_ids)} prompt + "
                                 f"{len(s.completion_ids)} completion tokens, over context_tokens={window}")
