"""Bad source files given to ``python -m corpus build``: each is a skipped item with a reason, never a
traceback, a hang or a read without end (issue 30).  Every case is a real file in tmp_path."""

from __future__ import annotations

import json
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus.sources import (
    MAX_JSON_DEPTH,
    Skips,
    UnreadableSource,
    file_source_hashes,
    path_documents,
    read_source_bytes,
)


def _docs(*sources):
    skips = Skips(quiet=True)
    docs = list(path_documents(sources, skips))
    return [d.id for d in docs], [f"{s['source']}: {s['reason']}" for s in skips.items]


def _finishes(fn, seconds: float = 10.0, fifo=None):
    """``fn()``'s result, failing (not hanging) when it blocks; a blocked FIFO reader is released."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive() and fifo is not None:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # let the blocked open/read return
        os.close(fd)
        t.join(5)
    assert out, f"{fn} did not finish within {seconds} s"
    return out[0]


def _line(i: int) -> str:
    return json.dumps({"id": f"d{i}", "text": f"document number {i}"})


def test_deeply_nested_line_is_skipped_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    too_deep = json.dumps({"id": "x", "text": "t", "meta": json.loads("[" * 200 + "]" * 200)})
    path.write_text("\n".join([_line(1), "[" * 100_000, too_deep, _line(2)]) + "\n")
    ids, skipped = _docs(path)
    assert ids == ["d1", "d2"]
    assert skipped == [
        f"deep.jsonl:{n}: JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)" for n in (2, 3)
    ]


def test_fifo_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    ids, skipped = _finishes(lambda: _docs(fifo), fifo=fifo)
    assert ids == [] and skipped == ["pipe.jsonl: not a regular file (a FIFO); give files or directories"]
    assert _finishes(lambda: file_source_hashes([fifo]), fifo=fifo)
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "dir" / "inner.md")
    (tmp_path / "dir" / "ok.txt").write_text("plain text")
    ids, skipped = _finishes(lambda: _docs(tmp_path / "dir"), fifo=tmp_path / "dir" / "inner.md")
    assert ids == ["ok.txt"] and skipped == [
        "inner.md: not a regular file (a FIFO); give files or directories"
    ]


def test_symlink_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    ids, skipped = _finishes(lambda: _docs(link))
    assert ids == [] and skipped == [
        "zero.jsonl: not a regular file (a character device); give files or directories"
    ]
    assert _finishes(lambda: file_source_hashes([link]))


def test_size_is_capped_by_what_is_read(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 11)
    assert read_source_bytes(path, limit=11) == b"x" * 11
    with pytest.raises(UnreadableSource, match="file too large"):
        read_source_bytes(path, limit=10)


def test_one_nul_byte_costs_one_line_not_the_file(tmp_path):
    path = tmp_path / "nul.jsonl"
    path.write_bytes(
        (_line(1) + "\n").encode()
        + b'{"id": "bad", "text": "a\x00b"}\n'
        + b"\xff\xfe\n"
        + (_line(2) + "\n").encode()
    )
    ids, skipped = _docs(path)
    assert ids == ["d1", "d2"]
    assert skipped == [
        "nul.jsonl:2: binary line (contains NUL bytes)",
        "nul.jsonl:3: undecodable bytes (not UTF-8 at byte 0 of the line)",
    ]


def test_binary_file_named_jsonl_is_given_up_with_bounded_noise(tmp_path):
    path = tmp_path / "blob.jsonl"
    path.write_bytes(b"\x00\x01\n" * 10_000)
    ids, skipped = _docs(path)
    assert ids == [] and len(skipped) == 21 and skipped[-1].startswith("blob.jsonl: not JSONL")


def test_line_separators_inside_json_strings_do_not_split_records(tmp_path):
    path = tmp_path / "sep.jsonl"
    rec = {"id": "s", "text": "one\u2028two\u0085three\x1cfour"}
    path.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    skips = Skips(quiet=True)
    docs = list(path_documents([path], skips))
    assert [d.text for d in docs] == [rec["text"]] and not skips.items


def test_lone_surrogate_escapes_and_huge_integers_are_skipped_lines(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(1),
                '{"id": "s", "text": "bad \\ud800"}',
                '{"id": ' + "9" * 5000 + ', "text": "t"}',
                '{"id": "p", "text": "pair \\ud83d\\ude00"}',
            ]
        )
        + "\n"
    )
    ids, skipped = _docs(path)
    assert ids == ["d1", "p"]
    assert [s.split(": ")[0] for s in skipped] == ["odd.jsonl:2", "odd.jsonl:3"]


def test_build_completes_past_every_bad_source(tmp_path):
    """One real build (embedder, FAISS, BM25, the manifest written as JSON) over the bad files."""
    from corpus.build import build_corpus
    from corpus.documents import Document
    from corpus.store import read_manifest

    good = tmp_path / "good.jsonl"
    good.write_bytes(
        "\n".join([_line(1), "[" * 100_000, _line(2)]).encode()
        + b"\n\x00\n"
        + b'{"id":"s","text":"\\udc80"}'
    )
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    deep_meta: dict = {}
    for _ in range(2 * MAX_JSON_DEPTH):
        deep_meta = {"m": deep_meta}
    given_docs = [
        Document(id="g", title="G", text="given", meta=deep_meta),
        Document(id="h", title="H", text="\udcff"),
    ]
    out = tmp_path / "corpus"
    manifest = _finishes(
        lambda: build_corpus([good, fifo, zero], out, documents=given_docs, progress=False),
        seconds=300,
        fifo=fifo,
    )
    assert manifest["counts"]["documents"] == 2 and manifest["counts"]["skipped"] == 7
    assert read_manifest(out)["counts"] == manifest["counts"]


def test_search_query_with_non_utf8_argv_bytes(tmp_path, capsys):
    """argv bytes that are not UTF-8 reach Python as lone surrogates; the query is read with U+FFFD."""
    from corpus.cli import _argv_text

    raw = b"cats \xff\xfe".decode("utf-8", "surrogateescape")
    assert _argv_text(raw, "query") == "cats \ufffd\ufffd"
    assert "not UTF-8" in capsys.readouterr().err
    assert _argv_text("cats", "query") == "cats"
    assert _argv_text("a\ud800", "query") == "a?"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "text", "title", "url", "links", "meta", "x"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bad=st.lists(
        st.one_of(
            _json.map(json.dumps),
            st.binary(max_size=40).filter(lambda b: b"\n" not in b).map(lambda b: b.decode("latin-1")),
        ),
        max_size=15,
    )
)
def test_random_lines_never_raise_and_good_lines_survive(tmp_path, bad):
    path = tmp_path / "fuzz.jsonl"
    lines = [_line(0), *bad, _line(1)]
    path.write_bytes(b"\n".join(x.encode("utf-8", "surrogatepass") for x in lines))
    skips = Skips(quiet=True)
    docs = list(path_documents([path], skips))
    ids = [d.id for d in docs]
    assert ids[0] == "d0" and ids[-1] == "d1"
    for d in docs:  # what is kept can be written
        json.dumps(d.to_dict(), ensure_ascii=False).encode("utf-8")
