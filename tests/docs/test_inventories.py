"""docs/inventories/*.inv: the offline intersphinx inventories match the installed packages."""
from __future__ import annotations

import importlib.util
import zlib
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "inventories"


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("inventories_build", FOLDER / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(data: bytes) -> dict[str, str]:
    """name -> uri of a version-2 inventory."""
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    return {line.split(" ")[0]: line.split(" ")[3] for line in lines}


def test_files_are_what_build_writes(build):
    built: dict[str, bytes] = {}
    build.build(lambda name, data: built.__setitem__(name, data))
    assert sorted(built) == sorted(p.name for p in FOLDER.glob("*.inv"))
    for name, data in built.items():
        assert (FOLDER / name).read_bytes() == data, (
            f"docs/inventories/{name} is stale: run `.venv/bin/python docs/inventories/build.py`"
        )


@pytest.mark.parametrize(("project", "name", "uri"), [
    ("torchrl", "torchrl.data.TensorDictReplayBuffer",
     "reference/generated/torchrl.data.TensorDictReplayBuffer.html#torchrl.data.TensorDictReplayBuffer"),
    # the defining module's name links to the public page
    ("torchrl", "torchrl.data.replay_buffers.replay_buffers.TensorDictReplayBuffer",
     "reference/generated/torchrl.data.TensorDictReplayBuffer.html#torchrl.data.TensorDictReplayBuffer"),
    ("tensordict", "tensordict.TensorDict",
     "reference/generated/tensordict.TensorDict.html#tensordict.TensorDict"),
    ("torch", "torch.utils.data.DataLoader", "data.html#torch.utils.data.DataLoader"),
    ("torch", "torch.Generator", "generated/torch.Generator.html#torch.Generator"),
    ("gymnasium", "gymnasium.vector.AutoresetMode", "api/vector/#gymnasium.vector.AutoresetMode"),
    ("gymnasium", "gymnasium.spaces.Dict", "api/spaces/composite/#gymnasium.spaces.Dict"),
])
def test_names_link_to_public_pages(project, name, uri):
    assert read((FOLDER / f"{project}.inv").read_bytes())[name] == uri
