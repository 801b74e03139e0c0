"""Sphinx configuration for the torchrl_ext documentation.

Build (warnings are errors, as in CI)::

    .venv/bin/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
"""

from __future__ import annotations

import importlib
import inspect
import sys
import tomllib
from pathlib import Path
from typing import Any

# -- Paths -------------------------------------------------------------------
# Import the package from the checkout, without installing it.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# -- Project information -----------------------------------------------------
with open(ROOT / "pyproject.toml", "rb") as f:
    _meta = tomllib.load(f)["project"]

project = "torchrl_ext"
author = "torchrl_ext contributors"
copyright = "torchrl_ext contributors"
release = _meta["version"]
version = ".".join(release.split(".")[:2])

# -- General configuration ---------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.napoleon",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {
    ".rst": "restructuredtext",
    ".md": "markdown",
}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/*.md5", "**/*.ipynb", "**/*.zip"]
templates_path: list[str] = []

# Unresolvable cross-references (torch, tensordict, torchrl types in
# signatures and type fields) are not warnings.
nitpicky = False

# -- intersphinx: links into torch, tensordict, torchrl, gymnasium ---------------
# The build runs offline: each project's inventory is a small file in
# docs/inventories/, written from the installed packages by
# docs/inventories/build.py, with the URLs of the projects' published pages.
_INVENTORIES = Path(__file__).parent / "inventories"
intersphinx_mapping = {
    "torch": ("https://docs.pytorch.org/docs/stable/", str(_INVENTORIES / "torch.inv")),
    "tensordict": ("https://docs.pytorch.org/tensordict/stable/",
                   str(_INVENTORIES / "tensordict.inv")),
    "torchrl": ("https://docs.pytorch.org/rl/stable/", str(_INVENTORIES / "torchrl.inv")),
    "gymnasium": ("https://gymnasium.farama.org/", str(_INVENTORIES / "gymnasium.inv")),
}

# -- sphinx-gallery: the examples, run in their quick mode, with their plots ------
sys.path.insert(0, str(Path(__file__).parent))  # gallery_argv.py
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "examples",
    # demo.py prints the same checks as the other examples, without a plot
    # demo.py is the README's tour; offline_export.py draws no plot and trains d3rlpy
    "ignore_pattern": r"(demo|offline_export)\.py",
    "filename_pattern": r".*\.py",  # run every example (each has a quick mode)
    "reset_argv": "gallery_argv.quick",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "min_reported_time": 1,
    "show_memory": False,
    "plot_gallery": "True",
}

# -- MyST (Markdown) -----------------------------------------------------------
myst_enable_extensions = ["colon_fence"]
# Generate anchors for h1-h3 so that [text](#some-heading) links resolve.
myst_heading_anchors = 3

# -- autodoc -------------------------------------------------------------------
autodoc_default_options = {
    "members": True,
    "member-order": "bysource",
    "show-inheritance": True,
    # Undocumented public members (enum values, interface overrides) are listed too.
    "undoc-members": True,
}
# Type hints go into the parameter descriptions, not the signature; this keeps
# signatures short and tolerates string annotations
# (``from __future__ import annotations``) and names only imported under
# ``typing.TYPE_CHECKING``.  Only documented parameters get a type.
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_typehints_format = "short"
# Show ``NestedKey`` as tensordict's public name, not ``tensordict._nestedkey``.
autodoc_type_aliases = {"NestedKey": "tensordict.NestedKey"}
# An override without a docstring must not pull in the docstring of the
# torchrl base class (its reST is not ours to keep warning-free).
autodoc_inherit_docstrings = False
# Class docstring only; put ``Args:`` in the class docstring, not __init__.
autoclass_content = "class"

# -- napoleon (Google style) -----------------------------------------------------
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_include_init_with_doc = False
# ``Attributes:`` sections become ``:ivar:`` fields rather than
# ``.. attribute::`` directives, so they never collide with attributes that
# autodoc documents itself (dataclass fields, properties).
napoleon_use_ivar = True
napoleon_use_param = True
napoleon_use_rtype = True
napoleon_preprocess_types = False
napoleon_attr_annotations = True

# -- HTML output -----------------------------------------------------------------
html_theme = "furo"
html_title = f"torchrl_ext {release}"
pygments_style = "friendly"
pygments_dark_style = "monokai"
html_static_path = ["_static"]
html_css_files = ["custom.css"]

# -- Document each public object exactly once ----------------------------------------
# ``torchrl_ext/__init__.py`` re-exports classes from its subpackages.  If both
# ``automodule:: torchrl_ext`` and ``automodule:: torchrl_ext.storages``
# documented ``TransitionStorage``, Sphinx would warn ("duplicate object
# description" of the canonical name, "more than one target found" for
# cross-references).  So an object is documented only under the most specific
# documented module that exports it; the others skip it.

#: Modules documented by ``automodule`` on the API pages: one page per module,
#: ``api/<module>.rst``, collected by a glob toctree in ``api/index.rst``.
DOCUMENTED_MODULES = tuple(
    sorted(p.stem for p in (Path(__file__).parent / "api").glob("torchrl_ext*.rst"))
)


def _exports(modname: str) -> dict[int, Any]:
    """Objects that ``automodule:: modname`` with ``:members:`` would list."""
    try:
        mod = importlib.import_module(modname)
    except Exception:  # a missing module is reported by automodule itself
        return {}
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [
            n
            for n, obj in vars(mod).items()
            if not n.startswith("_") and getattr(obj, "__module__", None) == modname
        ]
    out = {}
    for n in names:
        obj = getattr(mod, n, None)
        if obj is not None:
            out[id(obj)] = obj
    return out


_owner_cache: dict[int, str] = {}


def _owner(obj: Any) -> str | None:
    """The documented module that owns ``obj``: the longest-named exporter."""
    if not _owner_cache:
        for modname in sorted(DOCUMENTED_MODULES, key=len):
            for key in _exports(modname):
                _owner_cache[key] = modname  # longer (more specific) wins
    return _owner_cache.get(id(obj))


# autodoc passes the same options object to the module's
# ``autodoc-process-docstring`` event and to the ``autodoc-skip-member``
# events of its members; that is how a member learns which module lists it.
_module_of_options: list[tuple[Any, str]] = []


def _remember_module(app, what, name, obj, options, lines) -> None:
    if what == "module":
        _module_of_options.append((options, name))


def _skip_reexports(app, what, name, obj, skip, options):
    if skip or what != "module":
        return None
    current = next((m for o, m in reversed(_module_of_options) if o is options), None)
    if current is None:
        return None
    owner = _owner(obj)
    if owner is not None and owner != current:
        return True
    return None


# A class whose metaclass defines ``__call__(*args, **kwargs)`` (torchrl's
# ``Sampler`` does) would be shown as ``Class(*args, **kwargs)``; show the
# parameters of its own ``__init__`` instead.
def _class_signature(app, what, name, obj, options, signature, return_annotation):
    if what not in {"class", "exception"} or signature != "(*args, **kwargs)":
        return None
    init = next(
        (c.__dict__["__init__"] for c in obj.__mro__ if "__init__" in c.__dict__), None
    )
    if init is None or init is object.__init__:
        return None
    try:
        sig = inspect.signature(init)
    except (TypeError, ValueError):
        return None
    params = [
        p.replace(annotation=inspect.Parameter.empty)
        for p in list(sig.parameters.values())[1:]
    ]
    return str(sig.replace(parameters=params, return_annotation=sig.empty)), None


# -- Only our own members ------------------------------------------------------
# A tensorclass (``NStepReplayBatch``...) gets several hundred TensorDict methods
# copied into its class body, and a subclass of a torchrl component may carry
# attributes set by torchrl; autodoc would list them all as members of our
# class. A member is documented only when torchrl_ext defines it.
def _defined_here(obj: Any) -> bool | None:
    """Whether ``obj`` (a member) comes from torchrl_ext; None when it cannot tell."""
    func = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    if not (inspect.isroutine(func) or inspect.isclass(func) or isinstance(obj, property)):
        return None  # constants, enum members: judged by autodoc's own rules
    module = getattr(func, "__module__", None)
    return module is not None and module.split(".")[0] == "torchrl_ext"


def _skip_foreign_members(app, what, name, obj, skip, options):
    if skip or what not in {"class", "exception"}:
        return None
    return True if _defined_here(obj) is False else None


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
    app.connect("autodoc-process-signature", _class_signature)

    app.connect("autodoc-process-docstring", _remember_module)
    app.connect("autodoc-skip-member", _skip_reexports)
    return {"parallel_read_safe": True}
