"""Sphinx configuration of daskgrad's documentation: ``make docs`` (warnings are errors)."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))  # the checkout's daskgrad, not an installed one

import daskgrad  # noqa: E402

project = "daskgrad"
author = "daskgrad developers"
copyright = "2026, daskgrad developers"
release = version = daskgrad.__version__

extensions = [
    "myst_parser",            # the pages are markdown, as README.md and CONTRIBUTING.md
    "sphinx.ext.autodoc",     # the API reference, from the docstrings
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",    # numpy-style docstrings
    "sphinx.ext.intersphinx",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # signatures as written (torch's), not expanded annotations
autosummary_generate = False
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False

# no network at build time: intersphinx only where an inventory is cached (none by default)
intersphinx_mapping = {}

html_theme = "pydata_sphinx_theme"
html_title = f"daskgrad {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path = []
