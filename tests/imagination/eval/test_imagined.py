"""Evaluating a policy inside the world model from the real evaluation's starts."""
import json

import numpy as np
import pytest
import torch

from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EnvSpec, EvalConfig, Job
from robot_data.dataset import DatasetConfig, Episode, EpisodeDataset, EpisodeWriter
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

pytestmark = pytest.mark.libero  # init-state counts come from LIBERO's task registry

H, K = 16, 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("imag_eval")
    rng = np.random.default_rng(0)
    with EpisodeWriter(root / "data", DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for task, init, source in [(0, 0, "expert"), (0, 1, "expert"), (1, 0, "perturbed"), (1, 0, "expert")]:
            T = 12
            w.append(Episode(
                frames={"agentview": rng.integers(0, 255, (T, H, H, 3), dtype=np.uint8)},
                state=rng.normal(size=(T, 8)).astype(np.float32), action=rng.uniform(-1, 1, (T, 7)).astype(np.float32),
                reward=np.zeros(T, np.float32), success=np.zeros(T, bool), instruction=f"task {task}",
                suite="libero_spatial", task_id=task, source=source,
                perturbation="noise" if source == "perturbed" else "", init_state_id=init))
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    WorldModel(WorldModelConfig(views=["agentview"], denoiser=d)).save(root / "wm.pt")
    ProprioModel(ProprioConfig(chunk_len=K, hidden=16, layers=1)).save(root / "proprio.pt")
    return root


def _cfg(root, **kw):
    return EvalConfig(env="imagination", world_model=str(root / "wm.pt"), start_data=str(root / "data"),
                      proprio=str(root / "proprio.pt"), out_dir=str(root / "eval"), **kw)


def test_jobs_start_from_their_own_init_state(setup):
    from imagination.eval.imagined import ImaginationEvalEnv

    env = ImaginationEvalEnv(_cfg(setup), EnvSpec(("agentview",), H, K), [0, 0])
    ds = EpisodeDataset(setup / "data")
    obs = env.reset_envs([Job(0, 0, 0, 1, 5), Job(1, 1, 0, 0, 6)])
    np.testing.assert_array_equal(obs["image"][0, 0], ds[1].frames["agentview"][0])  # task 0, init 1
    np.testing.assert_array_equal(obs["image"][1, 0], ds[3].frames["agentview"][0])  # the expert one of task 1
    assert obs["instruction"] == ("task 0", "task 1")
    obs = env.reset_envs([None, Job(2, 0, 1, 7, 9)])  # no recorded episode from init state 7
    assert env.exact_starts == {0: True, 1: True, 2: False}
    with pytest.raises(ValueError, match="views"):
        ImaginationEvalEnv(_cfg(setup), EnvSpec(("agentview", "wrist"), H, K), [0])


def test_policy_evaluated_in_imagination(setup):
    from policies.vla import VLAConfig, VLAPolicy

    policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8]))
    result = evaluate(_cfg(setup, tasks=[0, 1], episodes_per_task=2, num_envs=2, max_steps=8, videos=1),
                      policy=policy, progress=False)
    assert result["env"] == "imagination" and result["overall"]["episodes"] == 4
    assert set(result["per_task"]) == {"0", "1"}
    assert all(r["steps"] <= 8 for r in result["episodes"])
    saved = json.loads((setup / "eval" / "results.json").read_text())
    assert saved["overall"]["episodes"] == 4 and (setup / "eval" / "videos").is_dir()


def test_policy_evaluated_in_imagination_judged_by_the_goal_reader(setup, tmp_path):
    """eval_policy env=imagination reward=goal goal_reader=...: every episode runs to the horizon (the goal judge's
    default ending) and its success is the reader's verdict on its last imagined frame."""
    from policies.vla import VLAConfig, VLAPolicy
    from world_models.goal_reader import GoalReader, GoalReaderConfig

    torch.manual_seed(0)
    GoalReader(GoalReaderConfig(channels=[8, 8], keypoints=8), "libero_spatial",
               {0: ["(on akita_black_bowl_1 plate_1)"], 1: ["(on akita_black_bowl_1 plate_1)"]}, H).save(
        tmp_path / "reader.pt")
    policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8]))
    result = evaluate(_cfg(setup, tasks=[0, 1], episodes_per_task=1, num_envs=2, max_steps=8, videos=0,
                           reward="goal", goal_reader=str(tmp_path / "reader.pt")), policy=policy, progress=False)
    assert result["overall"]["episodes"] == 2 and all(r["steps"] == 8 for r in result["episodes"])


def test_served_policy_evaluated_in_imagination_as_in_process(setup):
    """checkpoint=ws://... (policies/remote.py): the same imagined episodes as the policy in process."""
    from policies.serving import PolicyServer, ServeConfig
    from policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(1)
    policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8])).eval()
    common = dict(tasks=[0, 1], episodes_per_task=2, num_envs=2, max_steps=8, videos=0)
    local = evaluate(_cfg(setup, **common), policy=policy, progress=False)
    with PolicyServer(policy, ServeConfig(port=0)) as server:
        served = evaluate(_cfg(setup, checkpoint=server.url, **common), progress=False)
    keys = ("task_id", "init_state_id", "steps", "success", "max_success_prob")
    assert served["policy"] == "RemotePolicy"
    assert [[r[k] for k in keys] for r in served["episodes"]] == [[r[k] for k in keys] for r in local["episodes"]]
