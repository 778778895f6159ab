"""The imagination envs of an RL run (imagination/rl/training.py): the run's own, on the start episodes its tasks,
sources and reward admit, and the held-out check's, one imagined episode per held-out start."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.imagine import open_imagination
from imagination.keyframes import KeyframeConfig
from imagination.rewards.grasp import judge_for_run
from imagination.rl.config import ImagineRLConfig
from policies.base import Policy
from robot_data.dataset import EpisodeDataset, select_meta


def start_indices(cfg: ImagineRLConfig, source: str | None = None) -> list[int]:
    """Episode indices of start_data that start imagined episodes (cfg.tasks, cfg.sources), in dataset
    order; with `source`, only those of that source."""
    ds = EpisodeDataset(cfg.start_data, verify=False, features=cfg.imagination.features)
    picked = select_meta(ds.meta, task_id=list(cfg.tasks) or None, source=list(cfg.sources) or None,
                         suite=list(cfg.suites) or None)
    return [m.episode_index for m in select_meta(picked, source=source)]


def labelled_starts(data: str, picked: list[int], icfg: ImaginationConfig) -> list[int]:
    """`picked` episodes of `data`; with reward "state" or "grasp", only those with simulator labels (the object starts
    where the simulator had it), saying how many are left out (a replay that diverged has none). The head and the goal
    judge read only imagined frames: every picked episode."""
    if icfg.reward in ("head", "goal"):
        return picked
    from robot_data.sim_labels import label_path

    kept = [i for i in picked if label_path(data, i).is_file()]
    if len(kept) < len(picked):
        print(f"reward {icfg.reward!r}: {len(picked) - len(kept)} of {len(picked)} start episodes of {data} have no "
              "simulator labels and are left out (scripts/label_episodes.py labels a dataset)")
    return kept


def load_rl_env(cfg: ImagineRLConfig, out_dir: Path, policy: Policy | None = None,
                num_envs: int | None = None) -> ImaginationVectorEnv:
    """The imagination env of the run: world model, proprio model, start episodes filtered by task/source.
    With `policy`, checked against the world model, obs show only the views it reads. num_envs: default
    num_groups x group_size (a data-parallel process runs its share)."""
    for name in ("world_model", "start_data"):
        if not Path(getattr(cfg, name)).exists():
            raise FileNotFoundError(f"{name}: {getattr(cfg, name)!r} does not exist")
    picked = labelled_starts(cfg.start_data, start_indices(cfg), cfg.imagination)
    if not picked:
        raise ValueError(f"start_data: no episode of {cfg.start_data} matches tasks={cfg.tasks} sources={cfg.sources} "
                         f"suites={cfg.suites}"
                         + (" and has simulator labels" if cfg.imagination.reward in ("state", "grasp") else ""))
    # with no proprio model given, one is fitted on every episode of start_data (all of them teach the
    # dynamics) and kept in out_dir; so is the grasp judge, given its training data and no judge file
    return open_imagination(cfg.world_model, cfg.start_data, cfg.proprio,
                            num_envs or cfg.num_groups * cfg.group_size, judge_for_run(cfg.imagination, out_dir),
                            indices=picked,
                            policy=policy, proprio_cache=out_dir / "proprio.pt")


def heldout_env(cfg: ImagineRLConfig, env: ImaginationVectorEnv) -> ImaginationVectorEnv:
    """The env of the held-out check: its start data and world model (default: the run's), the run's proprio
    model and imagination settings, one imagined episode per held-out start episode, from frame 0 or (heldout.starts
    "rl") from the episode's most likely start under the run's keyframe settings."""
    h = cfg.heldout
    data = h.start_data or cfg.start_data
    if not Path(data).exists():
        raise FileNotFoundError(f"heldout.start_data: {data!r} does not exist")
    if h.world_model and not Path(h.world_model).is_file():
        raise FileNotFoundError(f"heldout.world_model: {h.world_model!r} is not a file")
    ds = EpisodeDataset(data, verify=False, features=cfg.imagination.features)
    picked = labelled_starts(data, ds.select(task_id=list(h.tasks) or None), env.cfg)[: h.max_episodes]
    if not picked:
        raise ValueError(f"heldout.start_data: no episode of {data} matches heldout.tasks={h.tasks}")
    keyframes = KeyframeConfig(mode="start") if h.starts == "start" else env.cfg.keyframes
    # one episode per start with fixed noise: no groups to share it within
    icfg = replace(env.cfg, keyframes=keyframes, uncertainty="off", noise_group=1)
    return open_imagination(h.world_model or env.wm, data, env.proprio,
                            min(len(picked), cfg.num_groups * cfg.group_size), icfg, indices=picked)


__all__ = ["heldout_env", "labelled_starts", "load_rl_env", "start_indices"]
