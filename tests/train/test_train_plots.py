"""The training figure draws the panels a run has data for: an SFT run logs only its loss."""

from __future__ import annotations

import json

from PIL import Image

from research_agent.train.plots import kind_pass_rates, panels, plot_training


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken line\n")


def test_sft_runs_get_the_loss_panel_only_and_rl_runs_all_three(tmp_path):
    sft = [{"step": i, "epoch": 0, "loss": 1.0 / i} for i in range(1, 5)]
    rl = [{"step": i, "reward": 0.1 * i, "pass_rate": 0.0, "loss": 0.01, "kl": 0.001,
           "tool_rate/execute": 1.5, "tool_rate/submit": 0.5} for i in range(1, 5)]
    assert panels(sft) == ["loss"]
    assert panels(rl) == ["reward", "loss", "tools"]
    widths = {}
    for name, rows in (("sft", sft), ("rl", rl)):
        _write(tmp_path / f"{name}.jsonl", rows)
        plot_training(tmp_path / f"{name}.jsonl", tmp_path / f"{name}.png")
        with Image.open(tmp_path / f"{name}.png") as im:
            widths[name] = im.size[0]
    assert widths["rl"] == 3 * widths["sft"]  # one 5-inch panel against three
    assert not list(tmp_path.glob("*.tmp.png"))


def test_no_rows_draws_nothing(tmp_path):
    _write(tmp_path / "m.jsonl", [])
    plot_training(tmp_path / "m.jsonl", tmp_path / "m.png")
    assert not (tmp_path / "m.png").exists()


def test_a_curriculum_run_gets_a_panel_of_draw_probabilities(tmp_path):
    rows = [{"step": i, "reward": 0.1, "loss": 0.01, "tool_rate/search": 1.0,
             "curriculum/capital": 0.5 - 0.1 * i, "curriculum/borders-both": 0.5 + 0.1 * i} for i in range(1, 4)]
    assert panels(rows) == ["reward", "loss", "tools", "curriculum"]
    _write(tmp_path / "m.jsonl", rows)
    plot_training(tmp_path / "m.jsonl", tmp_path / "m.png")
    with Image.open(tmp_path / "m.png") as im:
        assert im.size[0] == 4 * 5 * 90  # four 5-inch panels at 90 dpi


def test_per_kind_pass_rates_pool_the_trajectories_of_the_last_steps(tmp_path):
    """A kind is drawn a few times a step: its rate pools the window's trajectories, weighted by count."""
    rows = [{"step": 1, "reward": 0.5, "loss": 0.1, "kind/a/n": 4, "kind/a/pass_rate": 0.5, "kind/a/reward": 0.5},
            {"step": 2, "reward": 0.5, "loss": 0.1, "kind/a/n": 2, "kind/a/pass_rate": 1.0, "kind/a/reward": 1.0,
             "kind/b/n": 6, "kind/b/pass_rate": 0.0, "kind/b/reward": 0.0},
            {"step": 3, "reward": 0.5, "loss": 0.1, "kind/b/n": 2, "kind/b/pass_rate": 1.0, "kind/b/reward": 1.0}]
    rates = kind_pass_rates(rows, window=2)
    assert rates["a"] == [0.5, (2 + 2) / 6, 1.0]  # step 3's window (steps 2-3) holds a's 2 from step 2
    assert rates["b"] == [None, 0.0, 2 / 8]
    assert panels(rows) == ["reward", "loss", "kinds"]
    _write(tmp_path / "m.jsonl", rows)
    plot_training(tmp_path / "m.jsonl", tmp_path / "m.png")
    with Image.open(tmp_path / "m.png") as im:
        assert im.size[0] == 3 * 5 * 90
