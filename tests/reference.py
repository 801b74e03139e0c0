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
