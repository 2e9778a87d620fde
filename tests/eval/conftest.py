"""A scripted stand-in for ``run_batch`` so run-directory logic (resume, compare, checkpoints) is tested
without a model; the real agent is exercised end to end in test_end_to_end.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from research_agent.trajectory import Step, Trajectory


@dataclass
class ScriptedBatch:
    """Answers each item correctly unless its id is in ``wrong``; can stop after ``interrupt_after``."""

    wrong: set[str] = field(default_factory=set)
    interrupt_after: int | None = None
    calls: list[list[str]] = field(default_factory=list)
    guidance: dict[str, str] = field(default_factory=dict)  # item id -> guidance text it was given

    def __call__(self, items, policy, browser, config=None, *, progress=True, on_result=None, concurrency=8,
                 guidance=None, stop=None):
        self.calls.append([it["id"] for it in items])
        if guidance is not None:
            self.guidance.update({it["id"]: guidance(it) for it in items})
        out = []
        for n, item in enumerate(items):
            if stop is not None and stop.is_set():  # as the agent: nothing starts once stopped
                break
            if self.interrupt_after is not None and n == self.interrupt_after:
                raise KeyboardInterrupt
            answer = "wrong" if item["id"] in self.wrong else item["answers"][0]
            doc = (item.get("supporting_docs") or ["doc/x"])[0]
            chunk = f"{doc}#0"
            traj = Trajectory(
                question=item["question"],
                id=item["id"],
                gold={k: v for k, v in item.items() if k not in ("id", "question")},
                steps=[
                    Step("search", item["question"], info={"hits": [chunk], "doc_ids": [doc]}),
                    Step("answer", answer, info={"citations": [chunk], "supported": {answer: True}}),
                ],
                answer=answer,
                citations=[chunk],
                retrieved={chunk: f"text with {item['answers'][0]}"},
                meta={"seconds": 0.5},
            )
            if on_result is not None:
                on_result(traj)
            out.append(traj)
        return out


@pytest.fixture
def scripted(monkeypatch):
    import research_agent.agent as agent

    batch = ScriptedBatch()
    monkeypatch.setattr(agent, "run_batch", batch)
    return batch


def _make_items(n: int) -> list[dict]:
    return [
        {
            "id": f"q{i}",
            "question": f"question {i}?",
            "answers": [f"answer {i}"],
            "supporting_docs": [f"doc/{i}"],
        }
        for i in range(n)
    ]


@pytest.fixture
def make_items():
    """``make_items(n)``: n toy questions, each with a known gold document ``doc/<i>``."""
    return _make_items
