"""The training figure draws the panels a run has data for: an SFT run logs only its loss."""

from __future__ import annotations

import json

from PIL import Image

from research_agent.train.plots import panels, plot_training


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
