"""``eval docs-hits``: the right-API hit rate of the code agent's docs search, on a real BM25 API-docs
corpus built from the installed pandas."""

from __future__ import annotations

import pytest

from eval.docs_hits import docs_hits, is_right, main
from research_agent.code.demos import library_calls
from research_agent.code.tasks import CodeTask

REFERENCE = '''import pandas as pd
import numpy as np

def task_func(df, other):
    """Docstrings are dropped before the calls are read: pd.fake_call(x) is not one."""
    merged = pd.merge(df, other, on="k")
    means = merged.groupby("k").mean()
    means.plot(kind="bar")  # an accessor: documented as pandas.DataFrame.plot since api-docs v2
    first = [3, 1].index(1)  # a list method, not pandas (DataFrame.index is a property)
    return np.linspace(0, 1, 3), means.groupby("k").mean()
'''


@pytest.fixture(scope="module")
def pandas_docs(tmp_path_factory):
    from corpus import build_corpus, open_corpus
    from research_agent.code.apidocs import module_documents

    path = tmp_path_factory.mktemp("pandas-docs") / "api-docs"
    build_corpus(out=path, documents=module_documents("pandas"), dense=False, progress=False)
    return open_corpus(path, retriever="bm25", build_if_missing=False)  # BM25 only: no dense build


def test_library_calls_are_read_in_order_once_each():
    assert library_calls(REFERENCE.split('"""')[2]) == [
        ("pandas", "merge", "pandas merge"),
        ("pandas", "groupby", "pandas DataFrame groupby"),
        ("pandas", "plot", "pandas DataFrame plot"),
        ("numpy", "linspace", "numpy linspace"),
    ]


def test_accessors_get_documents_of_their_own():
    from research_agent.code.apidocs import module_documents

    ids = {d.id for d in module_documents("pandas")}
    assert {"api/pandas.DataFrame.plot", "api/pandas.Series.str", "api/pandas.Series.str.contains",
            "api/pandas.Series.dt"} <= ids


def test_a_hit_must_document_the_called_name_in_its_library():
    assert is_right("pandas.DataFrame.groupby", "pandas", "groupby")
    assert is_right("matplotlib.pyplot.bar", "matplotlib.pyplot", "bar")
    assert not is_right("pandas.DataFrame", "pandas", "groupby")  # a class page listing the method
    assert not is_right("numpy.merge", "pandas", "merge")


def test_hit_rate_counts_each_call_and_names_the_misses(pandas_docs, tmp_path, capsys):
    task = CodeTask(id="T1", prompt="", test_code="", entry_point="task_func", source="test",
                    meta={"reference": REFERENCE})
    report = docs_hits([task, CodeTask("T2", "", "", "f", "test", meta={})], pandas_docs, k=3)
    assert report["tasks"] == 1 and report["queries"] == 4  # T2 has no reference: not counted
    by_name = {r["name"]: r for r in report["rows"]}
    assert by_name["merge"]["rank"] is not None and "pandas.merge" in by_name["merge"]["hits"]
    assert by_name["plot"]["rank"] is not None and "pandas.DataFrame.plot" in by_name["plot"]["hits"]
    assert by_name["linspace"]["rank"] is None  # numpy is not in this corpus
    assert report["hit_rate"] == pytest.approx(sum(r["rank"] is not None for r in report["rows"]) / 4)
    assert ("numpy linspace", 1) in report["most_missed"]


def test_the_command_rejects_a_bad_task_spec_with_one_line(capsys):
    assert main(["--tasks", "nosuchbench"]) == 2
    assert "unknown task spec" in capsys.readouterr().err
