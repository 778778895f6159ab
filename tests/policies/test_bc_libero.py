"""The BC policy trained on a few expert episodes beats a random policy in real LIBERO.

Task 0 of LIBERO-Spatial: 4 scripted-expert episodes (init states 0-3) are collected here, the VLA is
trained by BC for 500 steps, then BC and the uniform random policy are evaluated on two *held-out*
init states (4, 5) with the same seeds and horizon. Measured here: BC 2/2, random 0/2.
"""
from __future__ import annotations

import pytest

from envs.collection import CollectConfig, collect
from envs.dataset import EpisodeDataset
from imagination.evaluate import EvalConfig, evaluate
from policies.bc import BCConfig, train_bc
from policies.vla import VLAConfig

pytestmark = [pytest.mark.slow, pytest.mark.libero]


def test_bc_on_four_expert_episodes_beats_random_in_real_libero(tmp_path):
    root = collect(CollectConfig(out_dir=str(tmp_path / "data"), tasks=[0], episodes_per_task=4,
                                 perturbed_fraction=0.0, views=["agentview", "wrist"], image_size=64,
                                 fast_render=True, num_workers=2))
    ds = EpisodeDataset(root)
    expert = ds.select(source="expert", success=True)
    assert len(expert) == 4, ds.meta
    cfg = BCConfig(out_dir=str(tmp_path / "bc"), policy=VLAConfig(chunk_len=8), steps=500, batch_size=32, lr=1e-3,
                   checkpoint_every=500, num_threads=1)
    bc = train_bc(cfg, [ds[i] for i in expert], ds.stats["observation.state"], progress=False)
    assert bc["final_loss"] < 0.3 * bc["first_loss"]

    # held-out init states 4 and 5; same seeds, horizon and rendering for both policies
    common = dict(env="libero_spatial", tasks=[0], episodes_per_task=2, init_state_offset=4, max_steps=150,
                  num_envs=2, fast_render=True, videos=0)
    ours = evaluate(EvalConfig(checkpoint=bc["policy_path"], out_dir=str(tmp_path / "eval_bc"), **common), progress=False)
    rand = evaluate(EvalConfig(checkpoint="random", out_dir=str(tmp_path / "eval_random"), **common), progress=False)
    assert [e["init_state_id"] for e in ours["episodes"]] == [4, 5]
    assert [e["seed"] for e in ours["episodes"]] == [e["seed"] for e in rand["episodes"]]
    s_bc, s_rand = ours["overall"]["successes"], rand["overall"]["successes"]
    print(f"BC {s_bc}/2 vs random {s_rand}/2 on held-out init states; BC episodes: {ours['episodes']}")
    assert s_bc >= 1 and s_bc > s_rand
