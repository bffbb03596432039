"""The documentation cannot rot: every docstring example and every example on the documentation pages runs here
(standard ``doctest``, no Sphinx needed), and every public function and class keeps its numpydoc Parameters /
Returns / Examples sections. The Sphinx build itself (warnings as errors) is ``.ci/docs``.

Examples assume ``import numpy as np`` and ``import twolayer as tl`` (the same globals as Sphinx's doctest
builder, see docs/conf.py).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl

DOCS = Path(__file__).resolve().parent.parent / "docs"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

MODULES = ["twolayer"] + sorted(
    m.name for m in pkgutil.walk_packages(tl.__path__, "twolayer.") if m.name.split(".")[-1] != "_core"
)
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.rst")) if DOCS.is_dir() else []


def _globs() -> dict[str, object]:
    return {"np": np, "tl": tl}


def _run(tests: list[doctest.DocTest]) -> None:
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test, out=report.append)
    assert not runner.failures, "".join(report)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    """Every ``>>>`` example in the module's docstrings (classes, functions, methods) runs and prints what it
    says."""
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    _run(finder.find(module, name, globs=_globs()))


@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page: str) -> None:
    """The ``>>>`` examples of the documentation pages run (also checked by Sphinx's doctest builder)."""
    path = DOCS / page
    text = path.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, _globs(), page, str(path), 0)
    _run([test])


def _public_objects() -> list[tuple[str, object]]:
    """(qualified name, object) of every public function and class: the names in each public module's
    ``__all__`` (or its public names defined there), once each."""
    seen: set[int] = set()
    out: list[tuple[str, object]] = []
    for name in MODULES:
        if any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for n in names:
            obj = getattr(module, n)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            if getattr(obj, "__module__", "").split(".")[0] != "twolayer":
                continue
            if "__all__" not in vars(module) and obj.__module__ != name:
                continue  # imported helpers (their own module lists them)
            seen.add(id(obj))
            out.append((f"{name}.{n}", obj))
    return out


PUBLIC = _public_objects()
# Interrupted and DeviceUnavailable are defined in the C++ bindings (their docstrings live there); cli.main belongs
# to the command-line module, whose help texts document it (twolayer --help).
EXEMPT = {"twolayer.Interrupted", "twolayer.DeviceUnavailable", "twolayer.cli.main"}


def _parameters(obj: object) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj  # type: ignore[misc]
    try:
        sig = inspect.signature(target)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters if p not in ("self", "cls") and not p.startswith("_")]


def _section(doc: str, title: str) -> bool:
    return re.search(rf"^\s*{title}\n\s*-{{{len(title)}}}\s*$", doc, re.MULTILINE) is not None


@pytest.mark.parametrize("qualname, obj", PUBLIC, ids=[q for q, _ in PUBLIC])
def test_public_docstring_sections(qualname: str, obj: object) -> None:
    """numpydoc sections of every public function and class: Parameters (when it takes any; classes may use
    Attributes), Returns (functions returning something) and an Examples section with a doctest."""
    if qualname in EXEMPT:
        return
    doc = inspect.getdoc(obj) or ""
    missing = []
    if _parameters(obj) and not (_section(doc, "Parameters") or (inspect.isclass(obj) and _section(doc, "Attributes"))):
        missing.append("Parameters")
    if inspect.isfunction(obj):
        ret = inspect.signature(obj).return_annotation
        if ret not in (None, "None", inspect.Signature.empty) and not _section(doc, "Returns"):
            missing.append("Returns")
    if not (_section(doc, "Examples") and ">>>" in doc):
        missing.append("Examples (with >>>)")
    assert not missing, f"{qualname}: docstring lacks {', '.join(missing)}"


def test_public_methods_documented() -> None:
    """Every public method and property of a public class has a docstring."""
    undocumented = []
    for qualname, obj in PUBLIC:
        if not inspect.isclass(obj) or qualname in EXEMPT:
            continue
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            if inspect.isfunction(member) or isinstance(member, property):
                if not (member.__doc__ or "").strip():
                    undocumented.append(f"{qualname}.{name}")
    assert not undocumented, f"no docstring: {', '.join(undocumented)}"


def test_no_design_md_citations() -> None:
    """Docstrings and sources cite the public conventions page, never the internal design notes."""
    roots = [Path(tl.__file__).resolve().parent, DOCS.parent / "cpp"]
    hits = [str(p) for root in roots if root.is_dir() for p in root.rglob("*") if p.suffix in (".py", ".hpp", ".cpp")
            and "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert not hits, f"DESIGN.md cited in {hits}; cite the documentation's conventions page instead"


def test_every_public_module_has_an_api_page() -> None:
    """Each public module of the package has its page in the API reference (docs/api/<name>.rst, listed in
    docs/api/index.rst), so a new module cannot go undocumented."""
    if not DOCS.is_dir():
        pytest.skip("no docs/ directory beside tests/ (tests run from an installed copy)")
    modules = sorted(m.name for m in pkgutil.iter_modules(tl.__path__) if not m.name.startswith("_"))
    index = (DOCS / "api" / "index.rst").read_text(encoding="utf-8")
    missing = [m for m in modules if not (DOCS / "api" / f"{m}.rst").is_file()
               or not re.search(rf"^\s+{m}\s*$", index, re.MULTILINE)]
    assert not missing, f"no API page (docs/api/<name>.rst in docs/api/index.rst's toctree) for {missing}"


def test_examples_named_in_the_docs_exist_and_papers_have_names() -> None:
    """Every ``examples/<file>`` the README, the pages, the package, the examples or the C++ sources name exists (the
    README listed three that did not), and they name papers, never the project's internal seed numbers."""
    root = DOCS.parent
    if not DOCS.is_dir() or not (root / "examples").is_dir():
        pytest.skip("no docs/ or examples/ beside tests/ (tests run from an installed copy)")
    sources = [root / "README.md", *DOCS.glob("*.rst"), *DOCS.glob("*/*.rst"),
               *Path(tl.__file__).resolve().parent.rglob("*.py"), *(root / "examples").iterdir(),
               *(p for p in (root / "cpp").rglob("*") if p.suffix in (".hpp", ".cpp", ".cu", ".cuh"))]
    missing, seeds = [], []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        missing += [f"{path.name}: {m}" for m in re.findall(r"examples/([\w.-]+\.(?:py|toml))", text)
                    if not (root / "examples" / m).is_file()]
        if path.name == "README.md":  # bare `name.py` / `name.toml`: an example or a top-level file
            missing += [f"README.md: {m}" for m in re.findall(r"`([\w.-]+\.(?:py|toml))`", text)
                        if not (root / "examples" / m).is_file() and not (root / m).is_file()]
        seeds += [f"{path.name}: {m}" for m in re.findall(r"\b[Ss]eed[ -]00\d\b|\bseed00\d_", text)]
    assert not missing, f"examples named but not there: {missing}"
    assert not seeds, f"internal seed numbers instead of paper names: {seeds}"
