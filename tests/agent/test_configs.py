"""One config layer for every command: strict booleans, typed values, unknown names and bad files
are one clear error naming the field, and ``ask``, ``train``, ``eval qa`` and ``eval code`` agree."""

from __future__ import annotations

import pytest

from research_agent.agent import AgentConfig
from research_agent.configs import ConfigError, build, load_file, parse_pairs


@pytest.mark.parametrize("raw,want", [("true", True), ("YES", True), ("1", True), ("on", True),
                                      ("false", False), ("no", False), ("0", False), ("off", False)])
def test_booleans_are_strict(raw, want):
    assert build(AgentConfig, {"semantic_citations": raw}).semantic_citations is want


@pytest.mark.parametrize("raw", ["maybe", "ture", "", "2"])
def test_a_boolean_typo_is_an_error_naming_the_field(raw):
    with pytest.raises(ConfigError, match="semantic_citations"):
        build(AgentConfig, {"semantic_citations": raw})


def test_types_unknown_names_and_refused_combinations():
    cfg = build(AgentConfig, {"max_turns": "3", "temperature": "0.5", "context": "managed"})
    assert (cfg.max_turns, cfg.temperature, cfg.managed) == (3, 0.5, True)
    with pytest.raises(ConfigError, match="max_turns: 'three' is not an integer"):
        build(AgentConfig, {"max_turns": "three"})
    with pytest.raises(ConfigError, match="unknown setting max_turn;.*max_turns"):
        build(AgentConfig, {"max_turn": "3"})
    with pytest.raises(ConfigError, match="max_turns must be at least 1"):
        build(AgentConfig, {"max_turns": 0})
    with pytest.raises(ConfigError, match="expected name=value"):
        parse_pairs(["max_turns"])


def test_config_files_are_read_strictly(tmp_path):
    good = tmp_path / "run.toml"
    good.write_text('share_prefix = "no"\nsteps = 3\nlora_targets = ["q_proj"]\n')
    from research_agent.train.config import TrainConfig, load_config

    cfg = build(TrainConfig, load_file(good))
    assert cfg.compute.share_prefix is False and cfg.steps == 3 and cfg.lora.targets == ["q_proj"]  # "no" is not True
    yaml = tmp_path / "run.yaml"
    yaml.write_text("steps: 4\ngradient_checkpointing: true\n")
    assert load_config(["--config", str(yaml)])[0].steps == 4
    (tmp_path / "bad.toml").write_text("steps = = 3\n")
    (tmp_path / "typed.toml").write_text('steps = "many"\n')
    for name, message in (("missing.toml", "does not exist"), ("bad.toml", "not valid TOML"),
                          ("typed.toml", "steps: 'many' is not an integer")):
        with pytest.raises(SystemExit, match=message):
            load_config(["--config", str(tmp_path / name)])


@pytest.mark.parametrize("argv,message", [
    (["--steps", "-5"], "steps must be at least 1"),
    (["--lr", "-1"], "lr must be positive"),
    (["--micro-batch", "0"], "micro_batch must be at least 1"),
    (["--temperature", "-1"], "temperature must not be negative"),
    (["--filter-low", "0.9", "--filter-high", "0.1"], "filter_low"),
    (["--stage", "sft", "--algorithm", "gigpo"], "RL setting"),
    (["--share-prefix", "maybe"], "share_prefix: 'maybe' is not a boolean"),
])
def test_train_refuses_settings_that_would_silently_do_the_wrong_thing(argv, message):
    from research_agent.train.config import load_config

    with pytest.raises(SystemExit, match=message):
        load_config(argv)


def test_a_bare_boolean_flag_means_true():
    from research_agent.train.config import load_config

    cfg, _ = load_config(["--allow-unsafe-sandbox", "--share-prefix", "false"])
    assert cfg.code.allow_unsafe_sandbox is True and cfg.compute.share_prefix is False


def test_the_same_flag_means_the_same_in_ask_eval_and_synth():
    from eval.cli import agent_config as eval_config
    from eval.cli import build_parser as eval_parser
    from eval.code import build_parser as code_parser
    from eval.code import code_config
    from research_agent.ask import agent_config as ask_config
    from research_agent.ask import build_parser as ask_parser
    from synth.__main__ import main as synth_main

    ask = ask_config(ask_parser().parse_args(["q", "--max-new-tokens", "40", "--context", "managed"]))
    ev = eval_config(eval_parser().parse_args(["qa", "--bench", "x", "--out", "o", "--max-new-tokens", "40",
                                               "--context", "managed"]))
    assert ask.max_new_tokens == ev.max_new_tokens == 40 and ask.managed and ev.managed
    assert ask.semantic_citations and not ev.semantic_citations, "ask's own default, eval's dataclass default"
    cargs = code_parser().parse_args(["--out", "o", "--max-new-tokens", "40", "--corpus", "docs-dir"])
    assert cargs.docs == "docs-dir" and code_config(cargs).max_new_tokens == 40
    with pytest.raises(SystemExit, match="max_turns must be at least 1"):
        ask_config(ask_parser().parse_args(["q", "--max-turns", "0"]))
    with pytest.raises(SystemExit, match="mode is set with --mode"):
        code_config(code_parser().parse_args(["--out", "o", "--set", "mode=no-tools"]))
    # synth refuses a bad setting before it loads anything (the QA file does not even exist)
    assert synth_main(["trajectories", "--qa", "missing.jsonl", "--out", "o", "--set", "max_turns=zero"]) == 2


def test_eval_reads_agent_settings_from_a_file_under_its_flags(tmp_path):
    from eval.cli import agent_config, build_parser
    from eval.code import build_parser as code_parser
    from eval.code import code_config

    path = tmp_path / "agent.toml"
    path.write_text('max_turns = 3\nsemantic_citations = "yes"\n')
    args = build_parser().parse_args(["qa", "--bench", "x", "--out", "o", "--config", str(path), "--max-turns", "4"])
    cfg = agent_config(args)
    assert cfg.max_turns == 4 and cfg.semantic_citations is True  # the flag wins over the file
    (tmp_path / "code.toml").write_text("test_feedback = true\nmax_turns = 2\n")
    code = code_config(code_parser().parse_args(["--out", "o", "--config", str(tmp_path / "code.toml"),
                                                 "--set", "max_turns=3"]))
    assert code.test_feedback is True and code.max_turns == 3
    with pytest.raises(SystemExit, match="does not exist"):
        agent_config(build_parser().parse_args(["qa", "--bench", "x", "--out", "o", "--config",
                                                str(tmp_path / "missing.toml")]))


def test_the_code_agents_grouped_settings_keep_their_flat_names(tmp_path):
    """CodeAgentConfig groups its submission and redraw switches into sections; flags, --set, files and
    records still name each by its flat name (redraw_repeats), and a file may also write the table."""
    import dataclasses

    from eval.code import build_parser as code_parser
    from eval.code import code_config
    from research_agent.code.agent import CodeAgentConfig
    from research_agent.configs import flat_dict
    from research_agent.train.config import load_config

    assert len(dataclasses.fields(CodeAgentConfig)) <= 12
    cfg = code_config(code_parser().parse_args(["--out", "o", "--set", "redraw_repeats=0",
                                                "--set", "submit_hint=false"]))
    assert cfg.redraw.repeats == 0 and cfg.submission.submit_hint is False and cfg.redraw.temperature == 1.0
    record = cfg.to_dict()
    assert record == flat_dict(cfg) and record["redraw_repeats"] == 0 and "redraw" not in record
    assert build(CodeAgentConfig, record) == cfg  # a record reads back as the same config
    (tmp_path / "code.toml").write_text("redraw_seed = 3\n[redraw]\nrepeats = 2\n")
    filed = code_config(code_parser().parse_args(["--out", "o", "--config", str(tmp_path / "code.toml")]))
    assert (filed.redraw.repeats, filed.redraw.seed) == (2, 3)
    with pytest.raises(SystemExit, match="redraw_repeats: 'x' is not an integer"):
        code_config(code_parser().parse_args(["--out", "o", "--set", "redraw_repeats=x"]))
    train, _ = load_config(["--task-type", "code", "--test-feedback", "false", "--code-mode", "code-only"])
    assert train.agent.test_feedback is False and train.agent.mode == "code-only" and train.agent.redraw.repeats == 0
    assert train.to_dict()["agent"]["redraw_repeats"] == 0
