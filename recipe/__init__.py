"""``python -m recipe``: the whole training loop in one resumable command.

corpus → research demonstrations (synth, real tool calls) [+ the student's own sampled runs, kept
when right and cited: rejection sampling] → SFT-export → SFT (cold start) → RL → held-out
evaluation of base, SFT and RL → paired comparison.  Every stage is the package's own CLI called
in-process with the flags the README's Results used, so this is a recipe, not a second
implementation.  A stage that finished leaves a marker in OUT and is skipped on the next run; the
ones that stop mid-way (trajectory synthesis, SFT, RL, eval) resume where they were, so an
interrupted recipe is simply started again.

    python -m recipe --out runs/recipe              # hours on 2 CPU cores (below)
    python -m recipe --out runs/quick --quick       # minutes: a smoke run

A chain longer than one working session persists in an artifact directory (``--artifacts DIR``,
or ``--preset NAME``, which names its own): each stage publishes its outputs and a card (command,
commit, input hashes, numbers) there when it ends, and long stages publish their newest
checkpoint or finished answers every ``--publish-minutes`` while they run.  In the next session,
on any machine, the same command restores the finished stages whose cards match, resumes the
partial one from its checkpoint and goes on; ``--stop-after MIN`` ends a session's share cleanly
(the running stage publishes and the recipe exits 3), so the session can commit the directory.
``recipe.artifacts`` says what is stored.

Every stage runs with the research budgets of configs/research.toml (10 turns, 8 tool calls, 3072
tokens).  Measured on 2 CPU cores with smollm2-135m: demonstrations ~35 s (all 1376 train
questions); SFT ~65 s a step of 4 (the default 240 demonstrations: 60 steps, ~65 min); one held-out
eval of 100 questions ~12 min at 16 in flight.  docs/training.md ("Training the default model in
stages") has the stage plan and measured cost of the qwen2.5-coder-0.5b preset.

The held-out questions are ``factbook-test``: the shipped task set's test split, separated from
the training split by document.

The package is the top layer of the house: it calls synthesis, the trainer and evaluation, and
nothing imports it.  ``plan`` says which stages run with which flags, ``run`` runs and publishes
them, ``artifacts`` stores them, ``ship`` makes the last adapter a named agent.
"""

from .plan import (
    PRESETS,
    EvalSet,
    Recipe,
    RLArm,
    models,
    research_qwen_v1,
    research_qwen_v2,
    research_qwen_v3,
    reward_ablation_smollm2,
    stages,
)
from .run import EXIT_STOPPED, StageFailed, StoppedForTime, run_recipe, run_stage

__all__ = ["EXIT_STOPPED", "PRESETS", "EvalSet", "RLArm", "Recipe", "StageFailed", "StoppedForTime", "models",
           "research_qwen_v1", "research_qwen_v2", "research_qwen_v3", "reward_ablation_smollm2", "run_recipe",
           "run_stage", "stages"]
