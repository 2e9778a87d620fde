"""C8: rewards for code tasks (search docs / execute code / submit against tests).

Two schemes: the seed's shaping (pass = 1.0; a failed attempt that searched the docs earns
0.05·min(searches, 3) to encourage looking things up; no submission at all = −0.1), and ToRL's
(+1 pass / −1 fail, −0.5 more when any executed code raised, to teach writing code that runs).
A submit step records info {"passed": bool}; an execute step records info {"ok": bool, "error": ...}.
With test feedback an episode may submit several times: the last submission is scored, and the
breakdown counts the submissions, so a hacking monitor can see "submit until it passes" loops.
"""

from __future__ import annotations

from typing import Any

from .base import RewardResult


def _submissions(traj: Any) -> list[bool]:
    return [bool((s.info or {}).get("passed")) for s in traj.steps if s.action == "submit"]


def _passed(traj: Any) -> bool:
    """The verdict pass@1 scores: the last submission's, or the autosubmitted code's when the episode
    ran out of turns on a run (``submit_last_run_at_limit``), so the reward and the trainer's pass rate
    never disagree about the same trajectory."""
    if (getattr(traj, "meta", None) or {}).get("autosubmitted"):
        return bool((getattr(traj, "gold", None) or {}).get("passed"))
    subs = _submissions(traj)
    return bool(subs) and subs[-1]  # the last submission is the one that counts


def code_shaped_reward(traj: Any) -> RewardResult:
    """Seed shaping: 1.0 pass; 0.05·min(searches, 3) failed-but-searched; −0.1 no submission.

    "No submission" reads the model's own actions: an autosubmitted episode that never submitted
    still costs −0.1 (the protocol is taught), one that submitted and then ran its fix scores the fix."""
    submitted = bool(_submissions(traj))
    passed = _passed(traj)
    searches = traj.count("search")
    if not submitted:
        score = -0.1
    elif passed:
        score = 1.0
    else:
        score = 0.05 * min(searches, 3)
    return RewardResult(
        score,
        {"passed": float(passed), "submitted": float(submitted), "searches": float(searches),
         "submissions": float(len(_submissions(traj)))},  # a monitor's view of submit-until-it-passes loops
    )


def code_torl_reward(traj: Any) -> RewardResult:
    """ToRL: +1 pass / −1 otherwise, and −0.5 if any executed code errored."""
    passed = _passed(traj)
    errored = any(
        s.action == "execute" and ((s.info or {}).get("ok") is False or (s.info or {}).get("error"))
        for s in traj.steps
    )
    score = (1.0 if passed else -1.0) - (0.5 if errored else 0.0)
    return RewardResult(score, {"passed": float(passed), "execution_error": float(errored),
                                "submissions": float(len(_submissions(traj)))})
