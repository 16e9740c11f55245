"""Sphinx configuration for interpexec's documentation (MyST markdown pages).

Build (warnings are errors; ``nox -s docs`` does exactly this, then checks that
every API section has its entries: ``python -m tests.docs_helpers check-api``)::

    pip install -r docs/requirements.txt
    rm -rf docs/_build/html
    sphinx-build -W --keep-going -b html docs docs/_build/html

interpexec itself is imported from this checkout (not installed), so
docs/requirements.txt names what its API reference imports.
"""

from __future__ import annotations

import importlib
import os
import sys

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# Import the package from this checkout even when it is not installed.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import interpexec  # noqa: E402

# -- Project -----------------------------------------------------------------
project = "interpexec"
author = "interpexec developers"
copyright = "interpexec developers"
version = release = interpexec.__version__

# -- General -----------------------------------------------------------------
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "requirements.txt"]
# No intersphinx: the build must not need the network.

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}

# -- HTML --------------------------------------------------------------------
try:
    import furo  # noqa: F401

    html_theme = "furo"
except ImportError:  # a bare `pip install sphinx` still builds
    html_theme = "alabaster"
html_title = f"interpexec {release}"
html_static_path: list[str] = []


# -- Optional parts of the API -----------------------------------------------
def available(dotted: str) -> bool:
    """True when ``dotted`` (a module, or a module attribute) can be imported."""
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        pass
    module, _, attr = dotted.rpartition(".")
    if not module:
        return False
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


class IfAvailable(SphinxDirective):
    """``{if-available} NAME``: render the content when NAME imports, and fail the
    build (an error, whatever ``-W`` says) when it does not, so that the API
    reference can never silently lose a section (``interpexec.Queue``,
    ``interpexec.aio``, ``interpexec.dask`` are documented inside it)."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if available(name):
            return self.parse_content_to_nodes()
        raise self.error(f"{name} does not import: its API reference cannot be built")


def _literal_call_signatures(
    app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """``submit`` reuses ``concurrent.futures.Executor.submit``'s docstring, whose
    plain ``fn(*args, **kwargs)`` reads as unbalanced rST emphasis: mark it literal."""
    for i, line in enumerate(lines):
        if "fn(*args, **kwargs)" in line and "``fn(*args, **kwargs)``" not in line:
            lines[i] = line.replace("fn(*args, **kwargs)", "``fn(*args, **kwargs)``")


def setup(app: Sphinx) -> dict[str, object]:
    app.add_directive("if-available", IfAvailable)
    app.connect("autodoc-process-docstring", _literal_call_signatures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
