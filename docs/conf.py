"""Sphinx configuration of hpsearch's documentation.

Build it (from the repository root, with the docs extra installed)::

    sphinx-build -W --keep-going -b html docs docs/_build/html

Nothing is fetched from the network: no intersphinx, and the notebooks run in a local kernel.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "hpsearch"
author = "hpsearch contributors"
copyright = "hpsearch contributors"
release = "0.1.0"

extensions = [
    "myst_nb",  # MyST Markdown pages and the notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "hpsearch_reference",
    "hpsearch_cli_command",
]

exclude_patterns = ["_build", "**/.ipynb_checkpoints", "jupyter_execute"]
suppress_warnings = ["myst.header"]  # moved pages keep their own heading levels

# MyST: anchors for headings (links such as pool.md#watching-it), and the directives used.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# The notebooks are committed without outputs; the build runs them, top to bottom, in a local
# kernel (from the repository root, where studies/ and runs/ are), and a notebook that raises
# fails the build. The cache keeps their outputs until a notebook's code changes.
os.environ.setdefault("HPSEARCH_STUDIES", str(HERE.parent / "studies"))
os.environ.setdefault("HPSEARCH_RUN_DIR", str(HERE / "_build" / "notebook-runs"))
os.environ.pop("MLFLOW_TRACKING_URI", None)
nb_execution_mode = os.environ.get("HPSEARCH_DOCS_EXECUTE", "cache")
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_in_temp = False
nb_merge_streams = True

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_use_ivar = True

html_theme = "furo"
html_title = "hpsearch"
html_static_path: list[str] = []
# The study file reference is long: keep its sections in the page's own table of contents.
html_theme_options = {"navigation_with_keys": True}
