"""API documentation of the installed libraries, as corpus documents for the code agent's ``search_docs``.

The docs come from the code itself (``inspect``: signatures and docstrings), so they describe
exactly the versions the sandbox will run — unlike hand-written snippets (the seed's DOC_STORE) or
web docs of another release. One document per public module, class and function; a class document
lists its methods with signatures and one-line summaries, and a method with a long docstring
(``pandas.DataFrame.groupby``) also gets a document of its own so a search can land on it directly.
Modules that are not installed are skipped with a notice, never an error.

``api_docs_browser`` opens the corpus (building it once, cached); eval and the trainer both use it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

STDLIB_MODULES = [
    "builtins", "collections", "collections.abc", "itertools", "functools", "operator", "re", "string",
    "textwrap", "json", "csv", "math", "cmath", "statistics", "random", "decimal", "fractions",
    "datetime", "time", "calendar", "zoneinfo", "os", "os.path", "pathlib", "shutil", "glob", "fnmatch",
    "tempfile", "io", "sys", "subprocess", "typing", "dataclasses", "enum", "heapq", "bisect", "array",
    "copy", "pprint", "hashlib", "hmac", "base64", "binascii", "codecs", "struct", "zlib", "gzip",
    "zipfile", "tarfile", "pickle", "sqlite3", "urllib.parse", "html", "xml.etree.ElementTree",
    "difflib", "unicodedata", "logging", "argparse", "inspect", "ast", "contextlib", "abc", "numbers",
    "secrets", "uuid", "threading", "queue", "concurrent.futures", "traceback", "warnings", "unittest",
    "ipaddress", "shlex", "platform", "locale",
]  # fmt: skip
# The libraries DataFrameBench / BigCodeBench tasks import most (see their ``libs`` fields).
THIRD_PARTY_MODULES = [
    "numpy", "numpy.linalg", "numpy.random", "pandas", "matplotlib.pyplot", "scipy.stats",
    "sklearn.preprocessing", "sklearn.linear_model", "sklearn.model_selection", "sklearn.cluster",
    "sklearn.metrics", "sklearn.decomposition", "seaborn", "statsmodels.api", "requests", "bs4",
]  # fmt: skip
DEFAULT_MODULES = STDLIB_MODULES + THIRD_PARTY_MODULES
# what the documents hold (v2: the accessors; v3: sklearn.model_selection); a cached corpus of another
# version is not reused
API_DOCS_VERSION = 3
LONG_METHOD_CHARS = 300  # a method documented at least this long gets its own document
MAX_DOC_CHARS = 20000


def _signature(obj: Any, name: str) -> str:
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name  # builtins without text signatures; their docstring usually starts with one


def _summary(doc: str) -> str:
    para = doc.strip().split("\n\n", 1)[0]
    return " ".join(para.split())[:200]


def _doc(obj: Any) -> str:
    try:
        return inspect.getdoc(obj) or ""
    except Exception:  # some descriptors raise on attribute access
        return ""


def _public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if not isinstance(names, list | tuple):
        names = [n for n in vars(module) if not n.startswith("_")]
    return sorted({n for n in names if isinstance(n, str) and not n.startswith("_")})


def _belongs(obj: Any, module: ModuleType) -> bool:
    """True when ``obj`` is defined in this module's package (re-exports of other packages are skipped)."""
    owner = getattr(obj, "__module__", None) or ""
    top = module.__name__.split(".")[0]
    if module.__name__ == "builtins":
        return owner == "builtins"
    # C implementations of stdlib modules live in _name (e.g. _collections, _heapq, posix for os)
    return owner.split(".")[0].lstrip("_") in (top, top.lstrip("_")) or owner in ("posix", "nt", "_operator")


def _class_members(cls: type) -> list[tuple[str, Any]]:
    members = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        try:
            raw = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if any(name in vars(base) for base in cls.__mro__ if base is not object) or cls is object:
            members.append((name, raw))
    return members


def _class_documents(cls: type, qual: str, module_name: str, doc_cls: Any) -> Iterator[Any]:
    lines = [f"class {_signature(cls, qual)}", "", _doc(cls)]
    own_docs = []
    methods = []
    accessors = []
    for name, raw in _class_members(cls):
        target = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
        accessor = accessor_class(raw)
        if accessor is not None:  # df.plot(...), s.str.contains(...): a class of its own under this name
            methods.append(f"  {name} (accessor): {_summary(_doc(accessor))}")
            accessors.append((name, accessor))
            continue
        if isinstance(raw, property):
            methods.append(f"  {name} (property): {_summary(_doc(raw))}")
            continue
        if not callable(target):
            continue
        doc = _doc(target)
        sig = _signature(target, name)
        methods.append(f"  {sig}: {_summary(doc)}")
        if len(doc) >= LONG_METHOD_CHARS:
            own_docs.append((f"{qual}.{name}", f"{_signature(target, f'{qual}.{name}')}\n\n{doc}"))
    if methods:
        lines += ["", "Methods and attributes:", *methods]
    yield _make(doc_cls, qual, "\n".join(lines), module_name, "class")
    for mqual, text in own_docs:
        yield _make(doc_cls, mqual, text, module_name, "method")
    for name, accessor in accessors:
        yield from _class_documents(accessor, f"{qual}.{name}", module_name, doc_cls)


def accessor_class(raw: Any) -> type | None:
    """The class behind a pandas-style accessor attribute (``DataFrame.plot`` → ``PlotAccessor``,
    ``Series.str`` → ``StringMethods``), or None. Without this the most used plotting and string APIs
    had no document of their own: ``df.plot(`` is in 22 of DataFrameBench's 100 test references, and
    its query found only ``DataFrame.boxplot``."""
    accessor = getattr(raw, "_accessor", None)
    return accessor if inspect.isclass(accessor) and not callable(raw) else None


def _make(doc_cls: Any, qual: str, text: str, module_name: str, kind: str) -> Any:
    return doc_cls(
        id=f"api/{qual}",
        title=qual,
        text=text.strip()[:MAX_DOC_CHARS],
        url="",
        links=[],
        meta={"source": "api-docs", "module": module_name, "kind": kind},
    )


def module_documents(module_name: str) -> Iterator[Any]:
    """Documents for one importable module; raises ImportError when it is not installed."""
    from corpus.documents import Document

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module(module_name)
    version = getattr(sys.modules.get(module_name.split(".")[0]), "__version__", "")
    entries = []
    for name in _public_names(module):
        try:
            obj = getattr(module, name, None)
        except Exception:  # noqa: BLE001 - a lazy name may raise anything; it is left out, not the module
            # sklearn.model_selection lists HalvingGridSearchCV, whose lookup raises ImportError until
            # an experimental flag is imported: that one name used to drop the whole module
            # (train_test_split, GridSearchCV, KFold ...) from the docs
            continue
        if obj is None or inspect.ismodule(obj) or not _belongs(obj, module):
            continue
        if inspect.isclass(obj) or callable(obj):
            entries.append((name, obj))
    header = f"module {module_name}" + (f" (version {version})" if version else "")
    listing = [f"  {n}: {_summary(_doc(o))}" for n, o in entries]
    text = "\n".join([header, "", _doc(module), "", "Contents:", *listing])
    yield _make(Document, module_name, text, module_name, "module")
    for name, obj in entries:
        qual = f"{module_name}.{name}"
        if inspect.isclass(obj):
            yield from _class_documents(obj, qual, module_name, Document)
        else:
            yield _make(Document, qual, f"{_signature(obj, qual)}\n\n{_doc(obj)}", module_name, "function")


def api_documents(modules: list[str] = DEFAULT_MODULES, progress: bool = True) -> Iterator[Any]:
    """Yield ``corpus.documents.Document``s for ``modules``; ids are ``api/<qualified name>``, unique."""
    seen: set[str] = set()
    for module_name in modules:
        count = 0
        try:
            for doc in module_documents(module_name):
                if doc.id not in seen:
                    seen.add(doc.id)
                    count += 1
                    yield doc
        except ImportError as e:
            if progress:
                print(f"api-docs: skipping {module_name} (not installed: {e})", file=sys.stderr, flush=True)
            continue
        if progress:
            print(f"api-docs: {module_name}: {count} documents", file=sys.stderr, flush=True)


def api_docs_dir() -> Path:
    from corpus.files import cache_dir

    # versioned: a corpus built before the accessor documents (v2) would silently miss them
    return cache_dir() / "corpora" / f"api-docs-v{API_DOCS_VERSION}"


def api_docs_browser(
    path: str | Path | None = None,
    modules: list[str] | None = None,
    *,
    retriever: str = "hybrid",
    progress: bool = True,
) -> Any:
    """A browser over the API-docs corpus at ``path`` (default: the cached one), built there on first use.

    Building embeds every documented function of the default modules (minutes on a CPU), so it is
    done once, under a lock, and reused by every later eval and training run: the docs a policy
    was trained to search are the docs it is evaluated with. A ``retriever="bm25"`` caller gets the
    chunks and BM25 index alone (seconds; the manifest marks the dense index as still to build, so
    a later hybrid caller starts it in the background) instead of waiting for embeddings it never uses.
    """
    from corpus import build_corpus, open_corpus
    from corpus.store import MANIFEST, build_lock

    target = Path(path).expanduser() if path else api_docs_dir()
    if not (target / MANIFEST).exists():
        with build_lock(target):
            if not (target / MANIFEST).exists():
                if progress:
                    print(f"building the API-docs corpus at {target} (once) ...", file=sys.stderr, flush=True)
                docs = api_documents(modules or DEFAULT_MODULES, progress=progress)
                build_corpus(out=target, documents=docs, progress=progress, dense=retriever != "bm25")
    return open_corpus(target, retriever=retriever)
