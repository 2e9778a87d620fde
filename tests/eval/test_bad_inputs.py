"""Bad JSONL benchmark files for ``python -m eval qa --bench FILE.jsonl`` (issue 30): a bad line is a
skipped, counted line; a file with nothing usable, not UTF-8 or not a regular file is refused with
one ``BenchmarkFormatError`` (exit status 2 from the CLI); never a traceback."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval.benchmarks import BenchmarkFormatError, load_benchmark, load_jsonl
from eval.cli import main as eval_main

GOOD = {"id": "good", "question": "Longest river?", "answers": ["Nile"]}

BAD_LINES = {
    "a JSON string": ('"the question is"', "not a JSON object (a string)"),
    "a JSON number": ("42", "not a JSON object (a number)"),
    "a JSON list": ('[{"question": "q?", "answers": ["a"]}]', "not a JSON object (an array)"),
    "answers a dict": (
        '{"question": "q?", "answers": {"a": 1}}',
        "each answer must be a string, not an object",
    ),
    "answers true": ('{"question": "q?", "answers": [true]}', "each answer must be a string, not a boolean"),
    "answers empty": ('{"question": "q?", "answers": ["", " "]}', "no non-empty answer"),
    "question a list": (
        '{"question": ["q?"], "answers": ["a"]}',
        "'question' must be a string, not an array",
    ),
    "question a number": ('{"question": 7, "answers": ["a"]}', "'question' must be a string, not a number"),
    "question empty": ('{"question": "  ", "answers": ["a"]}', "'question' is empty"),
    "question a lone surrogate": ('{"question": "\\ud800?", "answers": ["a"]}', "not text"),
    "id a list": ('{"id": [1], "question": "q?", "answers": ["a"]}', "'id' must be a string or an integer"),
    "deeply nested": ("[" * 100_000, "nested too deeply"),
    "a huge integer": ('{"question": "q?", "answers": [' + "9" * 5000 + "]}", "not valid JSON"),
    "not JSON": ("{question: q}", "not valid JSON"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_bad_line_is_skipped_and_counted(tmp_path, capsys, name):
    line, reason = BAD_LINES[name]
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    items, _ = load_benchmark(str(path))
    assert [it["id"] for it in items] == ["good"]
    err = capsys.readouterr().err
    assert "skipped 1 of 2 lines: line 2: " in err and reason in err


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_file_of_only_bad_lines_is_refused_by_the_cli(tmp_path, capsys, name):
    line, reason = BAD_LINES[name]
    path = tmp_path / "bench.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(BenchmarkFormatError, match="none of its 1 lines is a usable question"):
        load_benchmark(str(path))
    assert eval_main(["qa", "--bench", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and reason in err and "Traceback" not in err


def test_numbers_are_answers_as_their_text(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text('{"question": "Year?", "answer": 1990}\n{"question": "Pi?", "answers": ["3.14", 3.14]}\n')
    items, _ = load_benchmark(str(path), seed=0)
    assert sorted(it["answers"] for it in items) == [["1990"], ["3.14", "3.14"]]


def test_a_file_that_is_not_utf8_is_refused(tmp_path, capsys):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"question": "Caf\xe9?", "answers": ["x"]}\n')
    with pytest.raises(BenchmarkFormatError, match="is not UTF-8 .*save it as UTF-8"):
        load_benchmark(str(path))
    assert eval_main(["qa", "--bench", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_a_fifo_or_a_device_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(BenchmarkFormatError, match="not a regular file"):
        load_benchmark(str(fifo))
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    with pytest.raises(BenchmarkFormatError, match="not a regular file"):
        load_benchmark(str(zero))


def test_many_bad_lines_are_counted_not_all_listed(tmp_path, capsys):
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + "42\n" * 30)
    load_benchmark(str(path))
    err = capsys.readouterr().err
    assert "skipped 30 of 31 lines" in err and "and 25 more" in err


_scalar = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_record = st.fixed_dictionaries(
    {}, optional={"id": _json, "question": _json, "answers": _json, "answer": _json, "x": _json}
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(_json, _record).map(json.dumps) | st.text(max_size=20), max_size=12))
def test_random_json_lines_never_raise_anything_else(tmp_path, lines):
    """Any line is either a well-formed item or a skipped line; the good line always survives."""
    path = tmp_path / "fuzz.jsonl"
    body = [json.dumps(GOOD), *(ln.replace("\n", " ").replace("\r", " ") for ln in lines)]
    path.write_bytes("\n".join(body).encode("utf-8", "surrogatepass"))
    try:
        items, _ = load_jsonl(path)
    except BenchmarkFormatError as e:  # only a file-level refusal: this one has a good line, so not UTF-8
        assert "not UTF-8" in str(e)
        return
    assert items[0]["id"] == "good"
    for it in items:
        assert isinstance(it["question"], str) and it["question"].strip()
        assert it["answers"] and all(isinstance(a, str) and a.strip() for a in it["answers"])
        assert isinstance(it["id"], str) and it["id"]
        json.dumps(it, ensure_ascii=False).encode("utf-8")  # what is kept can be written to results
