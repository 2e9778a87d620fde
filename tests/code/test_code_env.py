"""CodeEnvironment: parsing (never raises on malformed output), tools, stop strings, prompts."""

from __future__ import annotations

import random

import pytest

from research_agent.code.env import MODES, CodeEnvironment
from research_agent.code.tasks import load_tasks

parse = CodeEnvironment.parse_text


@pytest.fixture(scope="module")
def task():
    return load_tasks("humaneval", limit=1)[0]


def test_parse_each_tool():
    assert parse("I'll look it up.\n<search>heapq nlargest</search>", "multi-tool") == (
        "search",
        "heapq nlargest",
        True,
        None,
    )
    assert parse("```python\nprint(1)\n```\n", "multi-tool") == ("execute", "print(1)", True, None)
    assert parse("Done.\n```submit\ndef f():\n    return 1\n```", "code-only")[:3] == (
        "submit",
        "def f():\n    return 1",
        True,
    )


def test_first_action_wins_and_unclosed_final_block_is_accepted():
    text = "```python\nprint(2)\n```\nthen <search>x</search>"
    assert parse(text, "multi-tool")[:2] == ("execute", "print(2)")
    # vLLM strips the stop string: the block arrives without its closing fence
    assert parse("```python\nprint(3)", "multi-tool")[:3] == ("execute", "print(3)", True)
    assert parse("<search>pandas merge", "multi-tool")[:2] == ("search", "pandas merge")


def test_echoed_hint_is_not_a_search():
    # qwen copied the invalid-turn hint back as its turn; the unclosed tag must not search the hint
    hint = parse("nothing useful", "multi-tool")[3]
    assert "<search>" in hint
    action, argument, valid, _ = parse(f"Invalid action: {hint}", "multi-tool")
    assert (action, valid) == ("invalid", False) and argument == ""
    # an unclosed tag followed by a runnable block: the block is the action
    assert parse("<search>pandas\n```python\nprint(1)\n```\n", "multi-tool")[:2] == ("execute", "print(1)")


def test_mode_rules():
    assert parse("<search>x</search>", "code-only")[2] is False
    assert parse("```python\ndef f(): pass\n```", "no-tools")[:2] == ("submit", "def f(): pass")
    assert parse("```\ndef f(): pass\n```", "no-tools")[0] == "submit"
    action, _, valid, error = parse("```\nprint(1)\n```", "multi-tool")
    assert (action, valid) == ("invalid", False) and "```python" in error
    assert parse("```bash\nls\n```", "code-only")[0] == "invalid"
    # a bare ``` opening fence is also the stop string: the turn ends there (smollm2 after code SFT wrote
    # "The error is:\n```\n" three times running); the message says why the block was empty
    action, _, valid, error = parse("The error is:\n```\n", "multi-tool")
    assert (action, valid) == ("invalid", False) and "bare ```" in error and "```python" in error
    assert parse("```python\n\n```\n", "code-only")[3] == "the code block was empty"


def test_a_quoted_bare_block_before_a_tagged_one_is_not_the_action():
    text = "The error is:\n```\nNameError: name 'pd' is not defined\n```\nFixed:\n```python\nimport pandas\n```\n"
    assert parse(text, "multi-tool")[:3] == ("execute", "import pandas", True)
    assert parse(text.replace("```python", "```submit"), "code-only")[:2] == ("submit", "import pandas")
    # a fence line inside a tagged block's body is its close, not a new block
    assert parse("```python\nx = 1\n```\n```\nnot code\n```\n", "code-only")[:2] == ("execute", "x = 1")
    # alone, a bare block is still refused in the tool modes and is the answer in no-tools
    assert parse("```\nprint(1)\n```\n", "code-only")[2] is False
    assert parse("```\ndef f(): pass\n```\n", "no-tools")[:2] == ("submit", "def f(): pass")


MALFORMED = [
    "",
    "   ",
    "no tools at all",
    "<search></search>",
    "<search>" + "q " * 500 + "</search>",
    "```python\n```",
    "```",
    "```python",
    "</search>",
    "<SEARCH>Case</SEARCH>",
    "```submit\n\n```",
    "\x00\x01```python\n\x00",
    "<search><search>a</search>",
    "``` python\nprint(1)\n```",
]
ALPHABET = [
    "<search>",
    "</search>",
    "```",
    "```python\n",
    "```submit\n",
    "\n",
    "x",
    " ",
    "print(1)",
    "<",
    "`",
]


@pytest.mark.parametrize("mode", MODES)
def test_parse_never_raises_on_malformed_outputs(mode):
    rng = random.Random(0)
    samples = MALFORMED + [
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))) for _ in range(300)
    ]
    for text in [*samples, None, 123]:
        action, argument, valid, error = parse(text, mode)
        assert action in ("search", "execute", "submit", "invalid")
        assert valid == (action != "invalid")
        assert (error is None) == valid
        assert isinstance(argument, str)
    assert parse("x", "bogus-mode")[0] == "invalid"


def test_stop_strings_cut_after_the_closing_fence_not_the_opening_one():
    text = "Let me test.\n```python\nprint(1)\n```\nand more prose"
    cuts = [text.find(s) + len(s) for s in CodeEnvironment.STOP_STRINGS if s in text]
    cut = text[: min(cuts)]
    assert cut.endswith("print(1)\n```\n")
    assert parse(cut, "multi-tool")[:2] == ("execute", "print(1)")
    assert not any(s in "```python\n" or s in "```submit\n" for s in CodeEnvironment.STOP_STRINGS)


def test_instructions_and_task_message(task):
    multi = CodeEnvironment.instructions("multi-tool")
    assert "<search>" in multi and "```python" in multi and "```submit" in multi
    assert "<search>" not in CodeEnvironment.instructions("code-only")
    assert "```python" in CodeEnvironment.instructions("no-tools")
    with pytest.raises(ValueError):
        CodeEnvironment.instructions("bogus")
    assert "has_close_elements" in CodeEnvironment.task_message(task)


def test_execute_and_submit_episode(task):
    env = CodeEnvironment(task)
    obs, info, done = env.run("execute", "print(6 * 7)\n1/0")
    assert "42" in obs and "ZeroDivisionError: division by zero" in obs and "Traceback" not in obs
    assert info == {"ok": False, "error": "ZeroDivisionError: division by zero"} and not done
    obs, info, done = env.run("submit", task.meta["reference"])
    assert obs == "All tests passed." and info["passed"] is True and done
    obs, info, done = CodeEnvironment(task).run("submit", "def has_close_elements(a, b):\n    return True\n")
    assert obs.startswith("Tests failed") and info["passed"] is False and done


def test_submit_hint_only_after_a_clean_run_that_defines_the_entry_point(task):
    env = CodeEnvironment(task)
    define = "def has_close_elements(numbers, threshold):\n    return False\nprint('ok')"
    obs, info, _ = env.run("execute", define)
    assert obs == "ok" and "empty ```submit block submits" in info["note"] and "`has_close_elements`" in info["note"]
    for code in ("print(1)", define + "\n1/0", "def has_close_elements_v2(x):\n    return x"):
        obs, info, _ = env.run("execute", code)
        assert "note" not in info, code
    obs, info, _ = CodeEnvironment(task, submit_hint=False).run("execute", define)
    assert obs == "ok" and "note" not in info


def test_an_empty_submit_block_submits_the_last_code_that_ran_and_defined_the_entry_point(task):
    assert parse("```submit\n```\n", "code-only") == ("submit", "", True, None)
    assert parse("```submit\n```\n", "no-tools")[:3] == ("invalid", "", False)
    env = CodeEnvironment(task)
    obs, info, done = env.run("submit", "")
    assert "empty" in obs and "has_close_elements" in obs and not done and env.submitted is None
    env.run("execute", task.meta["reference"])
    env.run("execute", "print('unrelated')")  # defines nothing: the solution stays the one to submit
    assert env.resolve_submit("  \n") == (task.meta["reference"], None)
    obs, info, done = env.run("submit", "")
    assert obs == "All tests passed." and done and env.submitted == task.meta["reference"]


def test_search_without_browser_is_a_clear_observation(task):
    obs, info, done = CodeEnvironment(task).run("search", "anything")
    assert "not available" in obs and info == {"hits": []} and not done


def test_search_over_real_api_docs(task):
    from corpus.browser import Hit
    from corpus.index import SparseIndex
    from research_agent.code.apidocs import api_documents

    docs = list(api_documents(["heapq", "collections", "json"], progress=False))

    class DocsBrowser:  # the Browser protocol's search + chunk_text over a BM25 index of whole documents
        def __init__(self):
            self.index = SparseIndex.build([d.title + "\n" + d.text for d in docs])

        def search(self, query, k=5):
            return [
                Hit(docs[i].id, f"{docs[i].id}#0", docs[i].title, "", docs[i].text[:200], s)
                for i, s in self.index.search(query, k)
            ]

        def chunk_text(self, chunk_id):
            return next(d.text for d in docs if f"{d.id}#0" == chunk_id)

    obs, info, done = CodeEnvironment(task, docs_browser=DocsBrowser()).run("search", "heapq nlargest")
    assert info["hits"][0] == "api/heapq.nlargest#0"
    assert "[heapq.nlargest]" in obs and "nlargest(n, iterable" in obs and not done
