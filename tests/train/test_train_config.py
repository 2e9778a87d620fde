"""The config's sections: a run directory written while every setting was flat still resumes, and
the flat names of flags, files and config.json keep meaning what they meant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from research_agent.configs import build
from research_agent.train.checkpoint import ResumeError, check_resume_config, write_config
from research_agent.train.config import TrainConfig, load_config, migrate

# config.json of the research-qwen-v1 RL stage, written before the config had sections
FLAT = json.loads((Path(__file__).parent.parent / "fixtures" / "flat_train_config.json").read_text())


def test_the_config_has_few_top_level_fields_and_the_rollout_agent_config_in_full():
    from dataclasses import fields

    from research_agent.agent import AgentConfig

    assert len(fields(TrainConfig)) <= 30
    saved = TrainConfig().to_dict()
    assert saved["agent"] == AgentConfig(max_turns=5, max_tool_calls=3, max_new_tokens=48, max_total_tokens=1024,
                                         temperature=0.7).__dict__  # every setting rollouts run with


def test_a_run_written_with_flat_settings_resumes_and_a_change_is_named_as_its_flag(tmp_path):
    cfg = TrainConfig(**migrate(FLAT))
    assert (cfg.lora.r, cfg.agent.max_turns, cfg.agent.temperature, cfg.checkpoints.every) == (16, 10, 1.0, 4)
    research_only = {k: v for k, v in FLAT.items() if k not in ("code_mode", "test_feedback")}
    assert build(TrainConfig, research_only) == cfg  # the flat names build the same config
    assert cfg.diff(FLAT) == [] and cfg.diff(migrate(FLAT)) == []
    (tmp_path / "config.json").write_text(json.dumps(FLAT))
    check_resume_config(tmp_path, build(TrainConfig, {"steps": 64, "concurrency": 2}, base=cfg))  # cost only
    for change, name in [({"lora_r": 8}, "lora_r"), ({"max_turns": 4}, "max_turns"), ({"filter_low": 0.1}, "filter_low"),
                         ({"curriculum": "learnability"}, "curriculum"), ({"reward": "f1"}, "reward")]:
        with pytest.raises(ResumeError, match=f"differs from the run being resumed in: {name}\\."):
            check_resume_config(tmp_path, build(TrainConfig, change, base=cfg))


def test_a_flat_code_run_drops_the_research_agent_settings_it_never_used(tmp_path):
    flat = {**FLAT, "task_type": "code", "code_mode": "code-only", "test_feedback": False, "max_new_tokens": 512,
            "max_total_tokens": 4096, "reward": "code_shaped"}
    nested = migrate(flat)
    assert nested["agent"]["mode"] == "code-only" and "template" not in nested["agent"]
    cfg = TrainConfig(**nested)
    assert type(cfg.agent).__name__ == "CodeAgentConfig" and cfg.agent.redraw.repeats == 0
    assert cfg.diff(flat) == []
    write_config(tmp_path, cfg)  # a run written now is nested and resumes as itself
    check_resume_config(tmp_path, TrainConfig(**json.loads((tmp_path / "config.json").read_text())))
    with pytest.raises(ResumeError, match="test_feedback"):
        check_resume_config(tmp_path, build(TrainConfig, {"test_feedback": True}, base=cfg))


def test_an_agent_setting_of_the_other_task_type_is_refused():
    with pytest.raises(SystemExit, match="code_mode is a code setting; task_type research takes none"):
        load_config(["--code-mode", "code-only"])
    with pytest.raises(SystemExit, match="context is a research setting; task_type code takes none"):
        load_config(["--task-type", "code", "--context", "managed"])
    with pytest.raises(SystemExit, match="max_tool_calls must be at least 1, not 0"):
        load_config(["--max-tool-calls", "0"])
    with pytest.raises(SystemExit, match="lora_r must be at least 1, not 0"):
        load_config(["--lora-r", "0"])
    with pytest.raises(SystemExit, match="lora_r: 'x' is not an integer"):
        load_config(["--lora-r", "x"])


def test_min_hops_draws_only_the_multi_hop_questions_and_is_a_research_setting():
    from research_agent.tasks import ResearchTasks

    cfg, _ = load_config(["--min-hops", "2"])
    items = ResearchTasks().load_tasks(cfg)
    everything = ResearchTasks().load_tasks(load_config([])[0])
    assert items and all(it["hops"] >= 2 for it in items)
    assert {it["kind"] for it in items} == {"borders-both", "capital-of-bordering", "population-of-capital-country"}
    assert len(items) == sum(1 for it in everything if (it.get("hops") or 1) >= 2) < len(everything)
    with pytest.raises(SystemExit, match="min_hops is a research setting"):
        load_config(["--task-type", "code", "--min-hops", "2"])
    with pytest.raises(SystemExit, match="min_hops is a research setting of at least 1, not 0"):
        load_config(["--min-hops", "0"])
