"""A slow, obviously-correct model of per-stream replay with FIFO rings.

Each stream is a Python list of rows. A step opens an episode with a row for
its observation unless the previous step of the stream continues it; the step
fills that row and appends a row for its next observation. A stream keeps its
last ``stream_capacity`` rows; a transition is live iff its row and the row
after it are both kept.
"""
from __future__ import annotations


class LoopReference:
    def __init__(self, num_streams: int, stream_capacity: int) -> None:
        self.capacity = stream_capacity
        self.rows: list[list[dict]] = [[] for _ in range(num_streams)]
        self.open = [False] * num_streams

    def step(self, s, obs, action, reward, next_obs, terminated, truncated) -> None:
        rows = self.rows[s]
        if not self.open[s]:
            rows.append({"obs": obs})
        assert rows[-1]["obs"] == obs, "a continuing step must start from the previous next obs"
        rows[-1]["step"] = (action, reward, terminated, truncated)
        rows.append({"obs": next_obs})
        self.open[s] = not (terminated or truncated)

    def live_transitions(self) -> list[tuple]:
        out = []
        for rows in self.rows:
            kept = rows[-self.capacity :]
            for row, nxt in zip(kept[:-1], kept[1:]):
                if "step" in row:
                    action, reward, terminated, truncated = row["step"]
                    out.append((row["obs"], action, reward, nxt["obs"], terminated, truncated))
        return sorted(out)


def nstep_reference(rows: list[dict], n: int, gamma: float) -> list[tuple]:
    """Every n-step window of one stream's kept rows, by walking the rows.

    A window starts at a step row and takes the following step rows of the
    same episode (an episode ends at a terminated or truncated step), at most
    ``n`` of them; its next observation is the row after its last step.
    Returns ``(obs, return, next_obs, terminated, truncated, k, discount)``.
    """
    out = []
    for i, row in enumerate(rows[:-1]):
        if "step" not in row:
            continue
        ret, k, j = 0.0, 0, i
        while True:
            _, reward, terminated, truncated = rows[j]["step"]
            ret += gamma**k * reward
            k += 1
            if terminated or truncated or k == n or "step" not in rows[j + 1]:
                break
            j += 1
        discount = gamma**k * (0.0 if terminated else 1.0)
        out.append((row["obs"], ret, rows[j + 1]["obs"], terminated, truncated, k, discount))
    return out


def sequence_reference(rows: list[dict], capacity: int, length: int | None, pad: bool = False) -> dict:
    """Every sequence a sequence sampler may serve from one stream's rows.

    ``rows`` is a :class:`LoopReference` stream (all rows ever written) and the
    stream keeps its last ``capacity`` of them. Walking the rows: an episode
    opens at a row, takes the following step rows until a terminated or
    truncated step, and the row after its last step holds its next (final or
    pending) observation; the next episode opens on the row after that.

    * ``length=L``: every run of ``L`` consecutive steps of one episode whose
      first step is kept; with ``pad``, also every episode of fewer than ``L``
      steps whose first row is kept, whole (the caller pads it).
    * ``length=None``: every complete episode (its last step is terminated or
      truncated) whose first row is kept, whole.

    Returns ``{sequence: starts_at_step_0}``, a sequence being a tuple of
    ``(obs, action, reward, next_obs, terminated, truncated)`` steps.
    """
    kept_from = max(len(rows) - capacity, 0)

    def transition(r: int) -> tuple:
        action, reward, terminated, truncated = rows[r]["step"]
        return (rows[r]["obs"], action, reward, rows[r + 1]["obs"], terminated, truncated)

    out: dict = {}
    first = 0
    while first < len(rows):
        step_rows, j, complete = [], first, False
        while j < len(rows) and "step" in rows[j]:
            step_rows.append(j)
            _, _, terminated, truncated = rows[j]["step"]
            j += 1
            if terminated or truncated:
                complete = True
                break
        episode = [transition(r) for r in step_rows]
        if length is None:
            if complete and first >= kept_from:
                out[tuple(episode)] = True
        else:
            for a in range(len(episode) - length + 1):
                if step_rows[a] >= kept_from:
                    out[tuple(episode[a : a + length])] = a == 0
            if pad and 0 < len(episode) < length and first >= kept_from:
                out[tuple(episode)] = True
        first = j + 1  # row j holds the observation after the episode's last step
    return out


def frame_reference(rows: list[dict], capacity: int, n_frames: int, n: int = 1) -> dict:
    """Every live transition's frame stacks, by walking one stream's rows.

    Row ``r - 1`` is in the episode of row ``r`` iff it holds a step (a row
    without one is the previous episode's final observation). A stack of the
    observation in row ``r`` takes rows ``r - F + 1 .. r``, each replaced by
    the episode's first row if it is earlier. The transition's window runs
    ``k <= n`` steps forward as in :func:`nstep_reference`.

    Returns ``{obs: (obs_stack, next_obs_stack, k)}``, or ``{obs: None}`` when
    a frame of the stack lies in a row the ring no longer keeps.
    """
    kept_from = max(len(rows) - capacity, 0)

    def stack(r: int) -> tuple[tuple, int]:
        first = r
        while first > 0 and "step" in rows[first - 1]:
            first -= 1
        picks = [max(r - j, first) for j in range(n_frames - 1, -1, -1)]
        return tuple(rows[p]["obs"] for p in picks), picks[0]

    out: dict = {}
    for i in range(kept_from, len(rows) - 1):
        if "step" not in rows[i]:
            continue
        j, k = i, 1
        while k < n and not (rows[j]["step"][2] or rows[j]["step"][3]) and "step" in rows[j + 1]:
            j, k = j + 1, k + 1
        obs_stack, oldest = stack(i)
        out[rows[i]["obs"]] = (obs_stack, stack(j + 1)[0], k) if oldest >= kept_from else None
    return out
