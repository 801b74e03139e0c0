"""Our on-disk format: save the held episodes, reload them into a new buffer."""
from __future__ import annotations

import pytest
import torch

from conftest import steps, transitions_of
from torchrl_ext import make_replay_buffer
from torchrl_ext.export import episodes_of, load_buffer, load_episodes, save_episodes


def two_streams(**kwargs):
    """Stream 0: an episode cut by the ring, then complete ones; stream 1: one running."""
    rb = make_replay_buffer(2 * 10, seed=0, **kwargs)
    for t in range(14):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        term = torch.tensor([[t in (8, 11)], [False]])
        nxt = torch.where(term, obs + 50, obs + 1)
        rb.extend(steps(obs, nxt, terminated=term))
    return rb


def test_episodes_of_holds_exactly_the_buffer():
    rb = two_streams()
    episodes = episodes_of(rb)
    assert sum(len(e) for e in episodes) == len(rb)
    assert [(e.stream, e.finished, e.complete) for e in episodes] == [
        (0, True, False), (0, True, True), (0, False, True), (1, False, False)]


def test_round_trip_into_a_new_buffer(tmp_path):
    rb = two_streams()
    save_episodes(rb, tmp_path / "export")
    back = load_buffer(tmp_path / "export", seed=0)
    assert len(back) == len(rb)
    assert transitions_of(back.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))
    assert [(e.stream, e.finished, len(e)) for e in episodes_of(back)] == [
        (e.stream, e.finished, len(e)) for e in episodes_of(rb)]
    # running episodes stay open: the next steps continue them in both buffers
    more = steps(torch.tensor([[14.0], [114.0]]), torch.tensor([[15.0], [115.0]]))
    rb.extend(more)
    back.extend(more.clone())
    assert [len(e) for e in episodes_of(back)] == [len(e) for e in episodes_of(rb)]


def test_round_trip_keeps_episodes_that_lost_their_first_rows_incomplete(tmp_path):
    """Reloaded, an episode whose first rows the ring had overwritten was taken to begin at
    its oldest held step: frame stacks there were padded with that step's frame, as at an
    episode start, where the original buffer holds no such window. It comes back
    incomplete, its steps numbered as before."""
    rb = two_streams(n_frames=3)
    save_episodes(rb, tmp_path / "export")
    back = load_buffer(tmp_path / "export", seed=0, n_frames=3)
    assert [(e.stream, e.complete, len(e)) for e in episodes_of(back)] == [
        (e.stream, e.complete, len(e)) for e in episodes_of(rb)]

    def stacks(buffer):
        return {tuple(row) for _ in range(20) for row in buffer.sample(64)["observation"].flatten(1).tolist()}
    assert stacks(back) == stacks(rb)


def test_round_trip_keeps_episodes_cut_without_a_done_flag(tmp_path):
    """An episode cut without a done flag (env reset by hand, a writer released)
    comes back as its own episode, not joined to the next one of its stream."""
    rb = make_replay_buffer(40, seed=0)
    for start in (0, 10):
        for t in range(start, start + 3):
            obs = torch.tensor([[float(t)], [100.0 + t]])
            rb.extend(steps(obs, obs + 1))
        rb.writer.end_episodes([0, 1])  # both envs reset by hand
    save_episodes(rb, tmp_path / "export")
    back = load_buffer(tmp_path / "export", seed=0)
    assert [(e.stream, e.finished, len(e)) for e in episodes_of(back)] == [
        (e.stream, e.finished, len(e)) for e in episodes_of(rb)] == [
        (0, True, 3), (0, True, 3), (1, True, 3), (1, True, 3)]
    assert transitions_of(back.storage.get(slice(None))) == transitions_of(rb.storage.get(slice(None)))


def test_load_episodes_reads_back_steps(tmp_path):
    rb = two_streams()
    save_episodes(rb, tmp_path)
    for saved, held in zip(load_episodes(tmp_path), episodes_of(rb)):
        assert torch.equal(saved.steps["observation"], held.steps["observation"])
        assert torch.equal(saved.steps["next", "observation"], held.steps["next", "observation"])


def test_save_refuses_to_overwrite_and_load_checks_format(tmp_path):
    rb = two_streams()
    save_episodes(rb, tmp_path)
    with pytest.raises(FileExistsError, match="already holds an export; pass a new directory"):
        save_episodes(rb, tmp_path)
    (tmp_path / "meta.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match=r"format 'other', expected one of 'torchrl_ext.episodes/2'"):
        load_episodes(tmp_path)


def test_first_step_bumped_the_format_and_version_1_exports_still_load(tmp_path):
    """first_step was added to each episode's record under the same format name:
    a reader of format 1 failed on an export with a bare 'too many values to unpack'.
    Exports are now format 2, which such a reader refuses by name; format 1
    exports (four fields per episode) still load, an incomplete episode read as
    having lost at least its first step."""
    import json

    rb = two_streams(n_frames=3)
    save_episodes(rb, tmp_path / "new")
    meta = json.loads((tmp_path / "new" / "meta.json").read_text())
    assert meta["format"] == "torchrl_ext.episodes/2"
    assert all(len(record) == 5 for record in meta["episodes"])
    meta.update(format="torchrl_ext.episodes/1", episodes=[r[:4] for r in meta["episodes"]])
    (tmp_path / "new" / "meta.json").write_text(json.dumps(meta))
    old = load_episodes(tmp_path / "new")
    assert [(e.complete, e.first_step) for e in old] == [(False, 1), (True, 0), (True, 0), (False, 1)]
    assert len(load_buffer(tmp_path / "new", seed=0, n_frames=3)) == len(rb)


def test_empty_buffer_exports_nothing(tmp_path):
    rb = make_replay_buffer(8)
    assert episodes_of(rb) == []


def test_missing_optional_dependency_names_the_extra():
    from torchrl_ext.export.episodes import require

    with pytest.raises(ImportError, match=r"install the extra 'minari': pip install 'torchrl_ext\[minari\]'"):
        require("torchrl_ext_no_such_module", "minari")
    with pytest.raises(ImportError, match=r"pip install --no-deps d3rlpy==2.8.1"):
        require("torchrl_ext_no_such_module", "d3rlpy")
