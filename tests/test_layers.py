"""No import runs back up the layers of ``docs/where_things_go.md``."""
from __future__ import annotations

import ast
from pathlib import Path

import torchrl_ext

PACKAGE = Path(torchrl_ext.__file__).parent

# layer of each top-level folder / module; a module imports only from layers <= its own
LAYERS = {
    "_compat": 0, "_atomic": 0, "_checkpoint": 0, "core": 0,
    "sample_index": 0,  # arriving with the d3 branch (storages import it)
    "storages": 1, "transforms": 1, "envs": 1,
    "writers": 2, "samplers": 2,
    "buffer": 3,
    "builders": 3,  # make_replay_buffer / make_her_replay_buffer: assemble a buffer.py buffer
    "remote": 3,  # the buffer in a Ray actor (buffer.py builds it for service_backend="ray")
    "model_based": 3,  # arriving with the mb branch: assembles like buffer.py
    "loader": 4,
    "_worker_batches": 4,  # how a loader worker's batch crosses to the main process (loader.py builds with it)
    "export": 4,  # arriving with the d3 branch: reads and rebuilds buffers
    "facades": 5,
}


def top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def imports(path: Path) -> list[str]:
    """Every ``torchrl_ext.*`` module ``path`` imports, at any depth (``TYPE_CHECKING`` too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchrl_ext."):
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("torchrl_ext.")]
    return out


def test_every_module_imports_only_its_layer_or_below():
    bad = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue  # the package re-exports everything
        layer = LAYERS.get(parts[0], 0)  # the deprecated torchrl_ext/episodes.py shim: layer 0
        for module in imports(path):
            if LAYERS[top(module)] > layer:
                bad.append(f"{'/'.join(parts)} imports {module}")
    assert not bad, bad


def test_every_folder_has_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    # deprecated shim modules sit at their old paths, importing layer 0 only
    assert folders | modules <= set(LAYERS) | {"episodes"}
