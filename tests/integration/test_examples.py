"""examples/nstep_dqn_cartpole.py and examples/sequence_replay.py: tiny runs, checked.

The example is imported by path (``examples/`` is not a package). It imports
``torchrl.collectors`` inside its own narrow ``warnings.catch_warnings`` (torchrl
0.14's DeprecationWarning about its weight updaters), so the import below runs
under this project's ``filterwarnings = error`` unchanged.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch
from torchrl.envs import SerialEnv

from torchrl_ext import make_replay_buffer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nstep_dqn_cartpole.py"


def load_example(path: Path):
    """Import an example by path, for the duration of a module's tests."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def example():
    yield from load_example(EXAMPLE)


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tiny_run_prints_stages_and_plots(example, tmp_path, capsys):
    plot = tmp_path / "curve.png"
    threads = torch.get_num_threads()
    history = example.main(["--frames", "2048", "--stages", "2", "--eval-episodes", "2",
                            "--seed", "0", "--plot", str(plot)])
    out = capsys.readouterr().out.splitlines()

    assert torch.get_num_threads() == threads  # main restores torch's thread count
    assert [f for f, _ in history] == [1024, 2048]
    assert all(1.0 <= r <= 500.0 for _, r in history)
    stage_lines = [line.split() for line in out if line.split()[:1] in (["1"], ["2"])]
    assert [cells[:2] for cells in stage_lines] == [["1", "1024"], ["2", "2048"]]
    assert out[-1] == f"plot: {plot}"

    assert_png(plot)
    (line,) = plt.gcf().axes[0].get_lines()  # the figure stays open for the gallery
    assert list(line.get_xdata()) == [1024, 2048]
    assert list(line.get_ydata()) == [r for _, r in history]
    plt.close("all")


def test_help_lists_the_options(example, capsys):
    with pytest.raises(SystemExit) as exit_info:
        example.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "--quick" in out and "--plot" in out


def test_loss_target_is_the_n_step_bootstrap(example):
    """DQNLoss's target equals ("next","reward") + discount * max_a Q_target(next obs)."""
    torch.manual_seed(0)
    env = SerialEnv(2, example.make_env)
    env.set_seed(0)
    rb = make_replay_buffer(4_096, n_step=example.N_STEP, gamma=example.GAMMA, seed=0)
    collector = example.Collector(env, policy=None, frames_per_batch=256, total_frames=512,
                                  replay_buffer=rb)
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    batch = rb.sample(512)
    k = batch["steps_to_next_obs"].view(-1)
    terminated = batch["next", "terminated"].view(-1)
    assert (k == 3).any() and (k < 3).any() and terminated.any()  # every case is covered

    actor = example.QValueActor(
        example.MLP(in_features=4, out_features=2, num_cells=[16]),
        in_keys=["observation"], spec=env.action_spec,
    )
    loss_fn = example.make_loss(actor)
    example.SoftUpdate(loss_fn, eps=0.995)  # as in the example (else torchrl warns)
    with torch.no_grad():  # the online net drifts away from the target copy
        for p in actor.parameters():
            p.add_(torch.randn_like(p))

    target = loss_fn.value_estimator.value_estimate(
        batch.clone(), target_params=loss_fn.target_value_network_params
    ).view(-1)
    with torch.no_grad(), loss_fn.target_value_network_params.to_module(actor):
        next_q = actor(batch["next"].select("observation").clone())["action_value"]
    expected = (
        batch["next", "reward"].view(-1)
        + example.GAMMA ** k.double() * (~terminated).double() * next_q.max(-1).values.double()
    )
    torch.testing.assert_close(target.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        expected, (batch["next", "reward"] + batch["discount"] * next_q.max(-1, keepdim=True).values)
        .view(-1).double(), rtol=1e-5, atol=1e-5,
    )

    q = actor(batch.select("observation").clone())["action_value"]
    chosen = (q * batch["action"].float()).sum(-1)
    manual = torch.nn.functional.smooth_l1_loss(chosen, expected.float())
    torch.testing.assert_close(loss_fn(batch.clone())["loss"], manual)


# ------------------------------------------------------- sequence_replay.py
SEQUENCE_EXAMPLE = EXAMPLE.parent / "sequence_replay.py"


@pytest.fixture(scope="module")
def sequence_example():
    yield from load_example(SEQUENCE_EXAMPLE)


def test_sequence_replay_quick_run_gru_beats_feed_forward(sequence_example, tmp_path, capsys):
    """Collector -> EpisodeReplayBuffer.add_step(is_last=...) -> [B, L] sequences:
    every sampled sequence stays inside one episode, and a GRU recovers CartPole's
    velocities from positions far better than a per-step MLP."""
    plot = tmp_path / "sequence.png"
    threads = torch.get_num_threads()
    result = sequence_example.main(["--quick", "--seed", "0", "--plot", str(plot)])
    out = capsys.readouterr().out.splitlines()

    assert torch.get_num_threads() == threads  # main restores torch's thread count
    # every frame stored once: capacity is the frame count, nothing is evicted
    assert result["frames"] == 2_048
    # one stored episode per collector trajectory (the running ones flushed)
    assert result["episodes"] == result["trajectories"] > 0
    # the within-episode check ran on every sampled sequence and always held
    assert result["sequences_checked"] >= 150 * sequence_example.BATCH_SIZE
    assert result["sequences_within_episode"] == result["sequences_checked"]
    assert out[-2] == (f"within one episode: {result['sequences_checked']}/"
                       f"{result['sequences_checked']} sampled sequences")
    # memory helps: the GRU is far below the feed-forward baseline, which stays
    # near the no-information floor (predicting the mean velocity)
    assert result["gru_mse"] < 0.2 * result["mlp_mse"]
    assert result["mlp_mse"] > 0.5 * result["mean_mse"]

    assert_png(plot)  # one curve per model + the floor
    labels = [line.get_label() for line in plt.gcf().axes[0].get_lines()]
    assert labels == ["GRU", "MLP", "mean predictor"]
    plt.close("all")


def test_sequence_replay_episode_check_catches_spliced_sequences(sequence_example):
    """The example's within-episode check is not vacuous: a sequence spliced from two
    episodes fails it, and so does one whose episode ends before its last step."""
    rb = sequence_example.EpisodeReplayBuffer(
        sequence_example.RingBufferDataset(1_024), batch_size=8, sequence_length=16, seed=0
    )
    sequence_example.fill(rb, 512, seed=0)
    batch = rb.sample()
    assert sequence_example.within_one_episode(batch).all()
    spliced = batch.clone()
    spliced[0, 8:] = batch[1, 8:]  # second half from another sequence
    assert sequence_example.within_one_episode(spliced).tolist() == [False] + [True] * 7
    ended = batch.clone()
    ended["done"][2, 5] = True  # an episode end inside the sequence
    assert not sequence_example.within_one_episode(ended)[2]


def test_every_example_has_help():
    """Each example is a tool: ``--help`` prints its usage, with no warning and no log line.

    The examples run side by side (each spends its seconds importing torch and torchrl).
    """
    import subprocess

    scripts = sorted(p.name for p in EXAMPLE.parent.glob("*.py"))
    assert {"demo.py", "her_bit_flipping.py", "nstep_dqn_cartpole.py", "sequence_replay.py"} <= set(scripts)
    runs = {
        script: subprocess.Popen(
            [sys.executable, "-W", "error", script, "--help"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            cwd=EXAMPLE.parent,  # demo.py imports its neighbour sequence_replay.py
        )
        for script in scripts
    }
    failed = {}
    try:
        for script, run in runs.items():
            out, err = run.communicate(timeout=180)
            if run.returncode != 0 or not out.startswith("usage:") or err:
                failed[script] = (run.returncode, out[:300], err[-2000:])
    finally:  # none left running after a timeout
        for run in runs.values():
            run.kill()
            run.wait()
    assert not failed, failed
