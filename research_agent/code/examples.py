"""Visible tests from a prompt's own examples: what test feedback may show on HumanEval.

HumanEval's ``check`` is the score, so a failed submission must not be answered from it: the model
would read the hidden asserts and fit them. What a programmer is shown is the docstring's examples
(``>>> f(1)`` / ``1``, or prose such as ``f([1, 2]) ➞ False``, ``f(5) returns 3``). They are parsed
here into (call, expected) pairs, kept only where the reference solution agrees (a handful of
HumanEval docstrings are wrong or not Python: ``("Venus")`` for a tuple, ``true``), and run as a
script that names each failing example, its result and the expected value. Scoring stays with the
full tests.
"""

from __future__ import annotations

import ast
import doctest
import re
from dataclasses import replace

from research_agent.code.sandbox import TEST_LIMITS, SandboxLimits, run_python

# Between a call and its result in HumanEval's prose examples (==>, =>, ➞, ->, ==, =, "returns",
# "should return", and the same after a '#').
_ARROW = re.compile(r"^\s*(?:#\s*)?(?:==>|=>|➞|->|==|=|returns?\b|should\s+return\b)\s*", re.I)
_FOR_OUTPUT = re.compile(r"(?im)^\s*for\s+(\w+)\s*=\s*(.+?),?\s+(?:the\s+sum\s+.*?\s+)?the\s+output\s+should\s+be\s+(.+)$")
_INPUT_OUTPUT = re.compile(r"(?im)^\s*input\s*:\s*(.+?)\s*\n\s*output\s*:\s*(.+?)\s*$")
_JS_LITERALS = {"true": "True", "false": "False", "null": "None"}

# The comparison both the validation and the visible tests use: floats within 1e-6, else ==.
_SAME_SRC = '''
import math as _math
def _same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
'''
MAX_SHOWN_CHARS = 200
EXAMPLE_FAILED = "EXAMPLE FAILED:"  # starts each failure line on stderr (code.env.failure_details reads them)


def _literal(text: str) -> str | None:
    """``text`` as the source of a Python literal (JSON's true/false/null accepted), or None."""
    text = _JS_LITERALS.get(text.strip(), text.strip())
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return repr(value)


def _leading_literal(text: str) -> str | None:
    """The longest literal that starts ``text`` ("3, because ..." → "3"; "'No' (the name...)" → "'No'")."""
    text = text.strip()
    cuts = [len(text)] + [i for i in range(len(text) - 1, 0, -1) if text[i] in " ,.;#(\t"]
    for cut in cuts:
        found = _literal(text[:cut].rstrip(" .,;"))
        if found is not None:
            return found
    return None


def _doctest_want(text: str) -> str | None:
    """A doctest's expected output as a literal, without the docstring's closing quotes that doctest
    reads as output when they sit at the example's indentation."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith(('"""', "'''")):
            break
        lines.append(line)
    return _literal("\n".join(lines)) if "".join(lines).strip() else None


def _call_at(line: str, start: int) -> str | None:
    """The call that begins at ``start`` (the function name), up to its balanced closing paren."""
    depth, quote = 0, ""
    for i in range(line.index("(", start), len(line)):
        ch = line[i]
        if quote:
            if ch == quote and line[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return line[start : i + 1]
    return None


def _is_call(src: str, entry_point: str) -> bool:
    """Whether ``src`` is one expression calling ``entry_point`` on literal arguments only."""
    try:
        node = ast.parse(src, mode="eval").body
    except SyntaxError:
        return False
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
        return False
    try:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            ast.literal_eval(arg)
    except (ValueError, SyntaxError, TypeError):
        return False
    return True


def docstring_examples(stub: str, entry_point: str) -> list[tuple[str, str]]:
    """Every (call, expected) example of ``entry_point`` in ``stub``, both as Python source, in order,
    without duplicates: doctest's ``>>>`` examples and one-line prose examples. Unverified: see
    ``validated_examples``."""
    found: list[tuple[str, str]] = []
    try:
        for ex in doctest.DocTestParser().get_examples(stub):
            want = _doctest_want(ex.want)
            if want is not None and _is_call(ex.source.strip(), entry_point):
                found.append((ex.source.strip(), want))
    except ValueError:  # a docstring doctest cannot parse (bad indentation): the prose pass still runs
        pass
    name = re.compile(rf"(?<![\w.]){re.escape(entry_point)}\s*\(")
    for line in stub.splitlines():
        if line.lstrip().startswith(">>>"):
            continue
        for m in name.finditer(line):
            if re.search(r"\bdef\s*$", line[: m.start()]):
                continue
            call = _call_at(line, m.start())
            if call is None or not _is_call(call, entry_point):
                continue
            arrow = _ARROW.match(line[m.start() + len(call) :])
            if arrow is None:
                continue
            want = _leading_literal(line[m.start() + len(call) + arrow.end() :])
            if want is not None:
                found.append((call, want))
    # "For num = "AB" the output should be 1." and "Input: [1, 2]" / "Output: [2, 1]" (one argument
    # or keyword arguments; wrong readings fall to the reference check)
    for m in _FOR_OUTPUT.finditer(stub):
        call, want = f"{entry_point}({m.group(2).strip().rstrip(',')})", _leading_literal(m.group(3))
        if want is not None and _is_call(call, entry_point):
            found.append((call, want))
    for m in _INPUT_OUTPUT.finditer(stub):
        call, want = f"{entry_point}({m.group(1).strip()})", _leading_literal(m.group(2))
        if want is not None and _is_call(call, entry_point):
            found.append((call, want))
    unique = []
    for pair in found:
        if pair not in unique:
            unique.append(pair)
    return unique


def visible_test_script(examples: list[tuple[str, str]]) -> str:
    """A script (run after the solution) that checks each example and, when any fails, prints one
    ``EXAMPLE FAILED:`` line per failure to stderr and exits non-zero."""
    cases = ",\n    ".join(f"({call!r}, {want})" for call, want in examples)
    return f'''{_SAME_SRC}
import sys as _sys
_EXAMPLES = [
    {cases},
]
_failed = []
for _src, _want in _EXAMPLES:
    try:
        _got = eval(_src)
    except Exception as _e:
        _failed.append(f"{{_src}} raised {{type(_e).__name__}}: {{_e}}")
        continue
    if not _same(_got, _want):
        _failed.append(f"{{_src}} returned {{_got!r}}, expected {{_want!r}}")
for _f in _failed:
    print({EXAMPLE_FAILED!r} + " " + (_f if len(_f) <= {MAX_SHOWN_CHARS} else _f[:{MAX_SHOWN_CHARS}] + "..."),
          file=_sys.stderr)
if _failed:
    raise SystemExit(f"{{len(_failed)}} of {{len(_EXAMPLES)}} examples failed")
'''


_VALIDATE = '''
def _check(_code, _examples):
    _ns = {}
    try:
        exec(_code, _ns)
    except Exception:
        return ""
    _keep = ""
    for _src, _want in _examples:
        try:
            _keep += "1" if _same(eval(_src, _ns), _want) else "0"
        except Exception:
            _keep += "0"
    return _keep
for _i, (_code, _examples) in enumerate(_TASKS):
    print(f"{_i}:{_check(_code, _examples)}")
'''


def validated_examples(
    references: list[tuple[str, list[tuple[str, str]]]], limits: SandboxLimits = TEST_LIMITS
) -> list[list[tuple[str, str]]]:
    """For each (reference solution, examples): the examples the reference agrees with.

    One sandbox run checks them all (HumanEval's 164 references with their ~500 examples take well
    under a second); a reference that fails to load keeps none. Raises RuntimeError when the run
    itself fails, since visible tests nobody checked would mislead the model."""
    tasks = ",\n".join(
        f"({code!r}, [{', '.join(f'({c!r}, {w})' for c, w in examples)}])" for code, examples in references
    )
    script = f"{_SAME_SRC}\n_TASKS = [\n{tasks}\n]\n{_VALIDATE}"
    res = run_python(script, replace(limits, output_chars=max(limits.output_chars, 200 * len(references) + 1000)))
    if not res.ok:
        raise RuntimeError(f"the docstring examples could not be checked against the references: {res.error}")
    keep: dict[int, str] = {}
    for line in res.stdout.splitlines():
        index, sep, bits = line.partition(":")
        if sep and index.isdigit():
            keep[int(index)] = bits
    if len(keep) != len(references):
        raise RuntimeError(f"checking the docstring examples printed {len(keep)} of {len(references)} results")
    # a reference that failed to load printed no bits: it keeps none
    return [
        [ex for ex, bit in zip(examples, keep[i].ljust(len(examples), "0"), strict=True) if bit == "1"]
        for i, (_, examples) in enumerate(references)
    ]
