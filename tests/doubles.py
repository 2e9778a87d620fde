"""The one policy test double: replays scripted turns through the full ``Policy.generate`` signature.

It stands in for the model only where a test needs known actions (the tools, the token stream, the
update are real). Each reply comes from the queue whose key appears in the decoded prompt
(``by_key``), else from ``turns``, else ``default``; every call's prompts, batch size and settings
are recorded, so a test can assert what the agent asked for.
"""

from __future__ import annotations

from research_agent.inference.policy import Generation


class ScriptedPolicy:
    def __init__(self, tokenizer, turns=(), *, by_key: dict[str, list[str]] | None = None,
                 default: str = "I am not sure.", logprob: float = -0.1, strict: bool = False,
                 name: str = "scripted"):
        """``strict``: a scripted turn longer than ``max_new_tokens`` fails the test (a real turn could not be)."""
        self.tokenizer, self.name = tokenizer, name
        self.turns = list(turns)
        self.by_key = {k: list(v) for k, v in (by_key or {}).items()}
        self.default, self.logprob, self.strict = default, logprob, strict
        self.prompts: list[list[int]] = []
        self.batch_sizes: list[int] = []
        self.loop_flags: list[bool] = []
        self.settings: list[dict] = []

    def reply(self, prompt: list[int]) -> str:
        if self.by_key:
            text = self.tokenizer.decode(prompt)
            queue = next((q for key, q in self.by_key.items() if key in text), None)
            if queue is not None:
                return queue.pop(0) if queue else self.default
        return self.turns.pop(0) if self.turns else self.default

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None, stop_loops=False, seeds=None):
        self.batch_sizes.append(len(prompts))
        self.loop_flags.append(stop_loops)
        self.settings.append({"max_new_tokens": max_new_tokens, "temperature": temperature, "stop": stop,
                           "stop_loops": stop_loops, "prompts": len(prompts), "seeds": seeds})
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            text = self.reply(list(p))
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if self.strict:
                assert len(ids) <= max_new_tokens, "a scripted turn longer than a real turn could be"
            out.append(Generation(text, ids, [self.logprob] * len(ids), "stop"))
        return out
