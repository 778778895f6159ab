"""Where an imagined episode ends at the latest, one rule for the env and the judges that pay at the horizon.

An episode that started at control step t runs to ImaginationConfig.max_steps (counted from the real episode's
start), or, with ImaginationConfig.imagined_steps > 0, to imagined_steps after t when that comes first. The env
truncates there, and the judges that pay an episode's verdict at its horizon ("goal", "grasp" holding to the
release) read that same step; a judge that computed its own horizon would pay a step the env never runs.
"""
from __future__ import annotations


def episode_end(t: int, max_steps: int, imagined_steps: int = 0) -> int:
    """The control step an episode started at step t ends at, at the latest."""
    return min(max_steps, t + imagined_steps) if imagined_steps > 0 else max_steps


__all__ = ["episode_end"]
