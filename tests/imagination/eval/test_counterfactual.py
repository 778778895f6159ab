"""Counterfactual check: the branch point, the AUC within start on hand-computed cases, and a real run where every
variant replays the same real moment exactly, then differs, and is judged in imagination."""
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.eval.counterfactual import CounterfactualConfig, branch_point, within_start
from robot_data.dataset import EpisodeDataset
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

H, K = 16, 4


def _gripper(values: list[float]) -> np.ndarray:
    a = np.zeros((len(values), 7), np.float32)
    a[:, 6] = values
    return a


def test_branch_point_is_before_the_held_close_on_a_chunk_boundary():
    # a one-step flick at step 2 is not the grasp; the close held from step 13 is
    g = [-1.0] * 2 + [0.5] + [-1.0] * 10 + [1.0] * 10
    assert branch_point(_gripper(g), lead_steps=4, chunk_len=4) == 8  # 13 - 4 = 9, down to 8
    assert branch_point(_gripper(g), lead_steps=4, chunk_len=4, hold=1) == 0  # the flick counts when one step holds
    assert branch_point(_gripper([-1.0] * 20), lead_steps=4, chunk_len=4) == 8  # never grasps: half-way
    assert branch_point(_gripper([1.0] * 20), lead_steps=4, chunk_len=4) == 0


def test_auc_within_start_counts_only_pairs_of_one_start():
    start = np.array([0, 0, 1, 1, 2, 2])
    real = np.array([True, False, True, False, True, True])  # start 2 does not split: no pair of its own
    right = within_start(np.array([0.9, 0.1, 0.3, 0.2, 0.0, 1.0]), real, start, boots=200)
    assert right["auc"] == 1.0 and right["split_starts"] == 2 and right["starts"] == 3
    assert right["ci95"] == [1.0, 1.0]
    # start 1's success scores below start 0's failure: across starts that is a wrong order, within them not
    assert within_start(np.array([0.9, 0.8, 0.3, 0.2, 0.5, 0.5]), real, start, boots=50)["auc"] == 1.0
    wrong = within_start(np.array([0.1, 0.9, 0.3, 0.2, 0.5, 0.5]), real, start, boots=500)
    assert wrong["auc"] == 0.5 and wrong["ci95"][0] == 0.0 and wrong["ci95"][1] == 1.0
    none = within_start(np.ones(4), np.array([True, True, False, False]), np.array([0, 0, 1, 1]))
    assert none["split_starts"] == 0 and math.isnan(none["auc"])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("counterfactual")
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))
    with torch.no_grad():  # a head that always says logit 2: every verdict is sigmoid(2)
        wm.head.out.weight.zero_()
        wm.head.out.bias.fill_(2.0)
    wm.save(root / "wm.pt")
    ProprioModel(ProprioConfig(chunk_len=K, hidden=16, layers=1)).save(root / "proprio.pt")
    from policies.vla import VLAConfig, VLAPolicy

    VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8])).save(root / "policy.pt")
    return root


def _cfg(root, out: str, **kw) -> CounterfactualConfig:
    return CounterfactualConfig(policy=str(root / "policy.pt"), world_model=str(root / "wm.pt"),
                                proprio=str(root / "proprio.pt"), suite="libero_spatial", tasks=[0], init_states=1,
                                variants=3, window=2 * K, lead_steps=2, max_steps=6 * K, noise_log_std=0.0,
                                num_envs=4, out_dir=str(root / out), **kw)


@pytest.mark.libero
def test_variants_replay_one_real_moment_exactly_then_differ_and_are_judged(models, capsys):
    from scripts.counterfactual_check import main

    result = main(_cfg(models, "run"))
    rows = result["variants"]
    assert [(r["start"], r["variant"]) for r in rows] == [(0, 0), (0, 1), (0, 2)]
    t0 = rows[0]["branch_t"]
    assert t0 % K == 0 and t0 >= K and {r["branch_t"] for r in rows} == {t0}
    ds = EpisodeDataset(str(models / "run" / "data"), verify=False)
    eps = [ds[i] for i in range(3)]
    frames = [e.frames["agentview"] for e in eps]
    # the replay to the branch point is exact (the same seed and actions), so the frames there are the same ...
    for f in frames[1:]:
        np.testing.assert_array_equal(f[:t0 + 1], frames[0][:t0 + 1])
    # ... and the sampled window differs (exploration noise std 1 on a random policy)
    assert not np.allclose(eps[0].action[t0:t0 + K], eps[1].action[t0:t0 + K])
    assert all(len(e.action) <= 6 * K + 1 for e in eps)  # max_steps ends the real episodes (plus the hold row)
    np.testing.assert_allclose([r["verdict"] for r in rows], 1 / (1 + math.exp(-2.0)), atol=1e-3)
    assert result["summary"]["starts"] == 1
    assert "AUC within start" in capsys.readouterr().out
    # judged again without the simulator: the same real variants, another judge setting under another name
    again = main(replace(_cfg(models, "run"), imagined_steps=K, name="short"))
    assert "reusing the 3 real variants" in capsys.readouterr().out
    assert [r["real_success"] for r in again["variants"]] == [r["real_success"] for r in rows]
    assert (models / "run" / "short.json").is_file() and (models / "run" / "counterfactual.json").is_file()
    with pytest.raises(ValueError, match="num_envs: common_noise needs at least one start's 3 variants"):
        main(replace(_cfg(models, "run"), num_envs=2, name="few_envs"))
    assert len(main(replace(_cfg(models, "run"), num_envs=2, common_noise=False, name="own"))["variants"]) == 3
    with pytest.raises(ValueError, match="out_dir: .* holds variants recorded with other variants"):
        main(replace(_cfg(models, "run"), variants=2))


def test_bad_settings_are_refused_with_the_field_named(models):
    from scripts.counterfactual_check import main

    good = _cfg(models, "bad")
    changes: list[tuple[dict, str]] = [({"tasks": []}, "tasks: expected one or more task ids"),
                                       ({"variants": 1}, "variants: expected an integer >= 2"),
                                       ({"policy": "nope.pt"}, "policy: expected a checkpoint file"),
                                       ({"name": "a/b"}, "name: expected a file name"),
                                       ({"reward": "goal", "goal_reader": "none.pt"}, "goal_reader: reward goal needs"),
                                       ({"reward": "grasp"}, "grasp_judge: reward grasp needs a judge file")]
    for change, message in changes:
        with pytest.raises(SystemExit, match=message):
            main(replace(good, **change))
    with pytest.raises(ValueError, match="window: expected a positive multiple of the policy's chunk length"):
        main(replace(good, window=K + 1, out_dir=str(models / "bad_window")))
