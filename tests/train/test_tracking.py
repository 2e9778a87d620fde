"""--report-to trackers and the collapse alarms (E7): what the trainer tells a person watching a run."""

from __future__ import annotations

import pytest

from research_agent.configs import ConfigError
from research_agent.train.config import TrainConfig
from research_agent.train.rl import collapse_alarm
from research_agent.train.tracking import TrackerError, check_tracker, make_tracker, scalars


def rows(n: int, **over):
    base = {"loss": 0.1, "kl": 0.01, "reward": 0.5, "answer_rate": 0.9, "entropy": 0.8, "trained_trajectories": 8}
    return [{"step": i + 1, **base, **{k: (v(i) if callable(v) else v) for k, v in over.items()}} for i in range(n)]


def test_alarms_name_each_collapse_and_stay_quiet_on_a_healthy_run():
    cfg = TrainConfig()
    assert collapse_alarm(rows(12), cfg) is None
    assert "entropy collapsed from" in collapse_alarm(rows(10, entropy=lambda i: 0.8 if i < 5 else 0.1), cfg)
    assert "below 0.02" in collapse_alarm(rows(5, entropy=0.001), cfg)
    # a step that trained nothing logs entropy 0: that is not a collapse
    assert collapse_alarm(rows(6, entropy=lambda i: 0.8 if i % 2 else 0.0,
                               trained_trajectories=lambda i: 8 if i % 2 else 0), cfg) is None
    # ... nor over a 10-step window: the run that raised this falsely had 4 untrained steps among its last 5
    assert collapse_alarm(rows(14, entropy=lambda i: 0.0 if i in (9, 10, 11, 13) else 0.6,
                               trained_trajectories=lambda i: 0 if i in (9, 10, 11, 13) else 8), cfg) is None
    assert "reward collapsed" in collapse_alarm(rows(10, reward=lambda i: 0.6 if i < 5 else 0.05), cfg)
    assert "KL" in collapse_alarm(rows(1, kl=5.0), cfg)
    assert "NaN" in collapse_alarm(rows(1, loss=float("nan")), cfg)


def test_tensorboard_gets_every_number_of_every_row(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = make_tracker("tensorboard", tmp_path, {"lr": 1e-4, "algorithm": "grpo"})
    for row in rows(3, reward=lambda i: i / 10):
        tracker.log({**row, "ok": True, "note": "text", "bad": float("inf")}, row["step"])
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss", "kl", "reward", "entropy"} <= tags and not {"ok", "note", "bad", "step"} & tags
    assert [(e.step, round(e.value, 3)) for e in acc.Scalars("reward")] == [(1, 0.0), (2, 0.1), (3, 0.2)]
    assert scalars({"a": 1, "b": True, "c": float("nan")}) == {"a": 1.0}


def test_an_unknown_or_missing_tracker_is_one_error_before_training(monkeypatch):
    with pytest.raises(ConfigError, match="report_to must be one of"):
        TrainConfig(report_to="mlflow")
    real = __import__("importlib.util").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(TrackerError, match=r"needs the wandb package: pip install 'research-agent\[wandb\]'"):
        check_tracker("wandb")
