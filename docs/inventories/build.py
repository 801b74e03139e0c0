"""Write the intersphinx inventories of torch, tensordict, torchrl and gymnasium.

The docs build runs offline, so ``conf.py`` reads these small inventories from
this folder instead of downloading each project's ``objects.inv``. They list
the public classes and functions of the installed packages (under their public
name and under the module that defines them) with the URL of their page in
each project's published docs. Regenerate after a version bump::

    .venv/bin/python docs/inventories/build.py

``tests/docs/test_inventories.py`` checks that the files match the installed
packages.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import warnings
import zlib
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent

#: project -> (docs root, modules whose public names are listed)
PROJECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch": ("https://docs.pytorch.org/docs/stable/", (
        "torch", "torch.nn", "torch.utils.data", "torch.multiprocessing",
    )),
    "tensordict": ("https://docs.pytorch.org/tensordict/stable/", (
        "tensordict", "tensordict.nn",
    )),
    "torchrl": ("https://docs.pytorch.org/rl/stable/", (
        "torchrl.data", "torchrl.data.replay_buffers", "torchrl.envs", "torchrl.envs.transforms",
        "torchrl.collectors", "torchrl.modules", "torchrl.objectives",
    )),
    "gymnasium": ("https://gymnasium.farama.org/", (
        "gymnasium", "gymnasium.spaces", "gymnasium.vector",
    )),
}

_GYM_COMPOSITE = {"Dict", "Tuple", "Sequence", "Graph", "OneOf"}


def page(project: str, name: str) -> str:
    """The page of public object ``name`` in ``project``'s published docs."""
    if project == "torch":
        if name == "torch.Tensor":
            return "tensors.html#torch.Tensor"
        if name.startswith("torch.utils.data."):
            return f"data.html#{name}"
        if name.startswith("torch.multiprocessing."):
            return f"multiprocessing.html#{name}"
        return f"generated/{name}.html#{name}"
    if project in ("tensordict", "torchrl"):
        return f"reference/generated/{name}.html#{name}"
    # gymnasium: one page per module, anchors per object
    parts = name.split(".")
    if parts[1] == "spaces":
        kind = "composite" if parts[-1] in _GYM_COMPOSITE else "fundamental"
        return f"api/spaces/{kind}/#{name}"
    if parts[1] == "vector":
        return f"api/vector/#{name}"
    if parts[1] in ("make", "make_vec", "register", "spec"):
        return f"api/registry/#{name}"
    return f"api/env/#{name}"


def public_objects(modname: str) -> dict[str, object]:
    """``modname``'s public classes and functions, by their public name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of the imported packages
        mod = importlib.import_module(modname)
        names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        out = {}
        for n in sorted(set(names)):
            try:
                obj = getattr(mod, n)
            except Exception:  # lazy attributes that fail to import
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
                out[f"{modname}.{n}"] = obj
        return out


def entries(project: str, modules: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``(name, role, uri)`` rows: each object under all its names, with one page.

    The page is the one of the first module (in ``modules`` order, most public
    first) that exports the object; the other public names and the defining
    module's name link to it.
    """
    rows: dict[str, tuple[str, str]] = {}
    uris: dict[int, str] = {}
    for modname in modules:
        for name, obj in public_objects(modname).items():
            role = "py:class" if inspect.isclass(obj) else "py:function"
            uri = uris.setdefault(id(obj), page(project, name))
            rows.setdefault(name, (role, uri))
            home = getattr(obj, "__module__", None)
            qual = getattr(obj, "__qualname__", None)
            if home and qual and home.split(".")[0] == project and "<" not in qual:
                rows.setdefault(f"{home}.{qual}", (role, uri))
    return [(n, role, uri) for n, (role, uri) in sorted(rows.items())]


def dump(project: str, version: str, rows: list[tuple[str, str, str]]) -> bytes:
    """Sphinx inventory version 2: a plain header, then zlib-compressed lines."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remaining of this file is compressed using zlib.\n"
    ).encode()
    body = "".join(f"{n} {role} 1 {uri} -\n" for n, role, uri in rows).encode()
    return header + zlib.compress(body, 9)


def build(write: Callable[[str, bytes], None]) -> None:
    for project, (_, modules) in PROJECTS.items():
        version = importlib.import_module(project).__version__
        short = ".".join(version.split("+")[0].split(".")[:2])
        write(f"{project}.inv", dump(project, short, entries(project, modules)))


if __name__ == "__main__":
    def _write(name: str, data: bytes) -> None:
        (HERE / name).write_bytes(data)
        print(f"wrote {HERE / name} ({len(data):,} bytes)", file=sys.stderr)

    build(_write)
