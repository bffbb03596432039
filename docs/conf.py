"""Sphinx configuration of the twolayer documentation site.

Sphinx + numpydoc + autodoc (rather than MkDocs + mkdocstrings): the package's docstrings are numpydoc, the
pages need real mathematics, and ``sphinx-build -W -b html`` plus ``-b doctest`` give one warnings-as-errors
build and one doctest run from the same sources, with no plugin outside Sphinx's own extensions and numpydoc.
Build: ``bash .ci/docs`` (or ``sphinx-build -W -b html docs docs/_build/html``).
"""

from __future__ import annotations

import twolayer

project = "twolayer"
author = "the twolayer developers"
copyright = "2026, the twolayer developers"
version = release = twolayer.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx-mathjax-offline",  # MathJax served from the built site: the pages' equations render offline too
]

exclude_patterns = ["_build", "README.md"]
root_doc = "index"
nitpicky = False

# autodoc / numpydoc
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc Parameters sections carry the types
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False



def _skip_dataclass_fields(app, what, name, obj, skip, options):
    """Dataclass fields are documented by their class docstring's Parameters / Attributes section; skip the bare
    field entries autodoc would add (methods and properties of the same name are kept)."""
    if what == "class" and name in _FIELDS and not (callable(obj) or isinstance(obj, property)):
        return True
    return None


def _dataclass_fields() -> set[str]:
    import dataclasses
    import importlib
    import pkgutil

    names: set[str] = set()
    for info in pkgutil.walk_packages(twolayer.__path__, "twolayer."):
        if info.name.endswith("_core"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                names.update(f.name for f in dataclasses.fields(obj))
    return names


_FIELDS = _dataclass_fields()


def setup(app):
    app.connect("autodoc-skip-member", _skip_dataclass_fields)


# The docstring examples run in the default test run (tests/test_docs.py); the doctest builder runs the
# examples on the pages.
doctest_global_setup = """
import numpy as np
import twolayer as tl
"""

html_theme = "furo"
html_title = f"twolayer {release}"
html_static_path: list[str] = []
