"""Reduce a submitted solution to what the tests need, before the tests run (evalplus-style).

Small models write the right function and then keep going: a usage example, a ``print`` of a demo
call, an ``if __name__ == "__main__":`` block, often cut mid-string by the token limit. Run as is,
such a submission fails on a SyntaxError in the demo, or runs a demo that reads files that do not
exist or waits on ``plt.show()``; the function itself was never tested. Benchmarks that score what
the model meant (EvalPlus, BigCodeBench) sanitize first, and pass@1 here does the same:

1. If the code does not parse, keep its longest prefix of whole lines that does (a cut tail goes).
2. Keep only top-level imports, function and class definitions, ``try``/``if`` blocks that guard
   imports or definitions, and the assignments those definitions (or the entry point) read,
   transitively; drop bare expressions (demo calls, prints), demo assignments
   (``result = task_func("data.csv")``), loops, asserts and ``if __name__ == "__main__":``.

Nothing is rewritten: kept statements are copied line for line, comments and all. When the result
would not define the entry point, the original code is returned unchanged so the tests report
the model's own error rather than one the sanitizer made.
"""

from __future__ import annotations

import ast
import threading

_DEFS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_ASSIGNS = (ast.Assign, ast.AnnAssign)
_KEPT = _DEFS + _ASSIGNS


_AST_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse``, one thread at a time.

    CPython 3.11 keeps the AST constructor's recursion depth in shared interpreter state, and
    parses running in several threads (the code agents' submissions are sanitized in their own
    threads) can fail spuriously with "SystemError: AST constructor recursion depth mismatch"
    (cpython gh-106905). Seen here: a test with 2 code tasks in flight failed on it in a full run.
    """
    with _AST_LOCK:
        return ast.parse(source)


def longest_parsable_prefix(code: str) -> str | None:
    """The longest prefix of whole lines that parses; None when not even one line does."""
    lines = code.splitlines(keepends=True)
    try:
        parse(code)
        return code
    except SyntaxError:
        pass
    # parse-ability of prefixes is not monotonic (an open bracket closes later), so walk down
    # from the end; submissions are a few hundred lines at most
    for end in range(len(lines) - 1, 0, -1):
        prefix = "".join(lines[:end])
        try:
            parse(prefix)
        except SyntaxError:
            continue
        return prefix if prefix.strip() else None
    return None


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _only_definitions(body: list[ast.stmt]) -> bool:
    return all(isinstance(n, _KEPT) or isinstance(n, ast.Pass) for n in body)


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, _DEFS):
        return True
    if _is_main_guard(node):
        return False
    if isinstance(node, ast.Try):  # try: import x / except ImportError: ...
        return _only_definitions(node.body)
    if isinstance(node, ast.If):  # if sys.version_info >= ...: def ...
        return _only_definitions(node.body) and _only_definitions(node.orelse)
    return False


def _loads(node: ast.AST) -> set[str]:
    """Names ``node`` reads from the module; a function's own parameters and locals do not count,
    so a demo ``df = pd.read_csv(...)`` is not kept just because the function has a local ``df``."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        globals_ = {name for n in ast.walk(node) if isinstance(n, ast.Global) for name in n.names}
        loads -= local - globals_
    return loads


def _targets(node: ast.stmt) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _kept_nodes(tree: ast.Module, entry_point: str, keep_assignments: bool = False) -> list[ast.stmt]:
    """Definitions, plus the assignments they read (to a fixpoint), in source order."""
    keep = {id(n) for n in tree.body if _is_definition(n) or (keep_assignments and isinstance(n, _ASSIGNS))}
    used = {entry_point}
    for n in tree.body:
        if id(n) in keep:
            used |= _loads(n)
    assigns = [n for n in tree.body if isinstance(n, _ASSIGNS)]
    changed = True
    while changed:
        changed = False
        for n in assigns:
            if id(n) not in keep and _targets(n) & used:
                keep.add(id(n))
                used |= _loads(n)
                changed = True
    return [n for n in tree.body if id(n) in keep]


def _defines(tree: ast.Module, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def changed(original: str, sanitized: str) -> bool:
    """Whether the tests saw less than the submission (blank lines aside)."""

    def significant(text: str) -> list[str]:
        return [ln.rstrip() for ln in text.splitlines() if ln.strip()]

    return significant(original) != significant(sanitized)


def sanitize(code: str, entry_point: str, *, keep_assignments: bool = False) -> str:
    """``code`` reduced to its imports and definitions; unchanged when that would lose ``entry_point``.

    ``keep_assignments`` keeps every top-level assignment: for tests that import the solution as a
    module (KodCode's ``from solution import NAME``) any constant can be part of its interface."""
    if not isinstance(code, str) or not code.strip():
        return code
    parsable = longest_parsable_prefix(code)
    if parsable is None:
        return code
    tree = parse(parsable)
    lines = parsable.splitlines(keepends=True)
    owner: list[int | None] = [None] * len(lines)  # top-level statement of each line; None: blank/comment
    for i, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for ln in range(first - 1, node.end_lineno):
            owner[ln] = i
    kept_ids = {id(n) for n in _kept_nodes(tree, entry_point, keep_assignments)}
    kept = {i for i, n in enumerate(tree.body) if id(n) in kept_ids}
    out: list[str] = []
    for ln, line in enumerate(lines):
        o = owner[ln]
        if o is None:  # a blank or comment line belongs with the statement after it
            o = next((x for x in owner[ln + 1 :] if x is not None), None)
        if o in kept:
            out.append(line if line.endswith("\n") else line + "\n")
    result = "".join(out)
    if not entry_point or not _defines(parse(result), entry_point):
        return code
    return result


__all__ = ["changed", "longest_parsable_prefix", "sanitize"]
