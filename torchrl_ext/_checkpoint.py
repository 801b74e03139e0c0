"""What a buffer checkpoint was built with, compared before a load changes anything.

A checkpoint holds the state of each component, not how the components were
built. Loaded into a buffer with another sampler kind, other sampler settings
or other writer keys, it would fail half-way (a missing file, after the rows
were already restored) or, worse, load and then draw other batches or delimit
episodes differently. :func:`components` describes a buffer's components;
:func:`check_components` compares two descriptions and names every difference.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchrl.data.replay_buffers.samplers import Sampler

__all__ = ["check_components", "check_saved_components", "components", "write_components"]

_FILE = "components.json"
# writer settings that decide where episodes end and what is stored
_WRITER_SETTINGS = ("done_keys", "reward_key", "traj_key", "mask_key", "writer_key")


def _sampler_chain(sampler: Sampler) -> list[dict[str, Any]]:
    """``[{"kind": name, setting: value, ...}]``, outermost sampler first.

    Each sampler class lists in ``checkpoint_settings`` the constructor
    settings its draws and state depend on; those that change per call (the
    refining samplers' ``n``, ``n_frames``...) are restored by the checkpoint
    instead of compared. Refining samplers are followed to their ``base``.
    """
    chain = []
    while sampler is not None:
        entry: dict[str, Any] = {"kind": type(sampler).__name__}
        for name in getattr(type(sampler), "checkpoint_settings", ()):
            entry[name] = getattr(sampler, name)
        chain.append(entry)
        sampler = getattr(sampler, "base", None)
    return chain


def components(sampler: Sampler, writer: Any) -> dict[str, Any]:
    """A JSON-ready description of ``sampler`` (and its bases) and ``writer``.

    Examples:
        >>> from torchrl_ext.samplers import EpochSampler, NStepSampler
        >>> from torchrl_ext.writers import TransitionWriter
        >>> components(NStepSampler(3), TransitionWriter())["sampler"]
        [{'kind': 'NStepSampler'}, {'kind': 'UniformTransitionSampler'}]
        >>> components(EpochSampler(ensemble_size=2), TransitionWriter())["sampler"]
        [{'kind': 'EpochSampler', 'holdout_fraction': 0.0, 'ensemble_size': 2, 'bootstrap': False}]
    """
    writer_settings = {
        name: getattr(writer, name) for name in _WRITER_SETTINGS if hasattr(writer, name)
    }
    described = {
        "sampler": _sampler_chain(sampler),
        "writer": {"kind": type(writer).__name__, **writer_settings},
    }
    return json.loads(json.dumps(described))  # tuples as lists, enums as values: as saved


def check_components(where: str, saved: dict[str, Any], here: dict[str, Any]) -> None:
    """Raise a ValueError naming every way ``here`` differs from the ``saved`` description.

    Examples:
        >>> from torchrl_ext.samplers import EpochSampler, NStepSampler
        >>> from torchrl_ext.writers import TransitionWriter
        >>> check_components("loads", components(NStepSampler(3), TransitionWriter()),
        ...                  components(EpochSampler(), TransitionWriter()))
        Traceback (most recent call last):
        ...
        ValueError: loads: the checkpoint was written by a buffer built otherwise: sampler: the checkpoint has NStepSampler > UniformTransitionSampler, this buffer EpochSampler; ...
    """
    differences = []
    kinds = [[entry["kind"] for entry in d["sampler"]] for d in (saved, here)]
    if kinds[0] != kinds[1]:
        differences.append(
            f"sampler: the checkpoint has {' > '.join(kinds[0])}, "
            f"this buffer {' > '.join(kinds[1])}"
        )
    else:
        for old, new in zip(saved["sampler"], here["sampler"]):
            differences += _settings_differ(old["kind"], old, new)
    differences += _settings_differ("writer", saved["writer"], here["writer"])
    if differences:
        raise ValueError(
            f"{where}: the checkpoint was written by a buffer built otherwise: "
            f"{'; '.join(differences)}; build the buffer with the checkpoint's sampler "
            "and writer settings, then load."
        )


def _settings_differ(label: str, saved: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """One line per setting of ``saved`` that ``here`` does not have the same."""
    return [
        f"{label} {name}: the checkpoint has {saved[name]!r}, this buffer {here.get(name)!r}"
        for name in saved
        if saved[name] != here.get(name)
    ]


def write_components(directory: Path, sampler: Sampler, writer: Any) -> None:
    """Write the description of ``sampler`` and ``writer`` into a checkpoint ``directory``."""
    (directory / _FILE).write_text(json.dumps(components(sampler, writer)))


def check_saved_components(where: str, directory: Path, sampler: Sampler, writer: Any) -> None:
    """:func:`check_components` against what :func:`write_components` left in ``directory``.

    A checkpoint written before the description existed is trusted.
    """
    saved = directory / _FILE
    if saved.exists():
        check_components(f"{where}({str(directory)!r})", json.loads(saved.read_text()),
                         components(sampler, writer))
