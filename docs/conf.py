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

# The docstring examples run in the default test run (tests/test_docs.py); the doctest builder runs the
# examples on the pages.
doctest_global_setup = """
import numpy as np
import twolayer as tl
"""

html_theme = "furo"
html_title = f"twolayer {release}"
html_static_path: list[str] = []
