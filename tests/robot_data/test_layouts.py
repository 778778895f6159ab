"""Scene layouts with their objects' positions (robot_data/layouts.py): drawn layouts differ, an official init state is
rendered exactly as the env observes it, and the npz files read back or are refused with one clear error."""
from __future__ import annotations

import numpy as np
import pytest

from robot_data.layouts import LAYOUT_KEYS, LayoutConfig, read_layouts, write_layouts


def _arrays(n: int = 2) -> dict[str, np.ndarray]:
    return {"images": np.zeros((n, 1, 8, 8, 3), np.uint8), "object_pos": np.ones((n, 3), np.float32),
            "target_pos": np.zeros((n, 3), np.float32), "task_id": np.arange(n), "init_state_id": -np.ones(n, int)}


def test_layout_files_read_back_and_bad_ones_are_refused(tmp_path):
    info = {"suite": "libero_spatial", "views": ["agentview"], "image_size": 8, "fast_render": True, "seed": 0}
    write_layouts(tmp_path / "a.npz", _arrays(2), info)
    write_layouts(tmp_path / "b.npz", _arrays(3), info)
    arrays, infos = read_layouts([tmp_path / "a.npz", tmp_path / "b.npz"])
    assert {k: len(v) for k, v in arrays.items()} == {k: 5 for k in LAYOUT_KEYS} and infos == [info, info]
    write_layouts(tmp_path / "c.npz", _arrays(1), {**info, "suite": "libero_object"})
    with pytest.raises(ValueError, match="different suites"):
        read_layouts([tmp_path / "a.npz", tmp_path / "c.npz"])
    with pytest.raises(ValueError, match="is not a file"):
        read_layouts([tmp_path / "none.npz"])
    with pytest.raises(ValueError, match="missing arrays"):
        write_layouts(tmp_path / "d.npz", {"images": np.zeros(1)}, info)
    for bad, match in (({"tasks": []}, "tasks"), ({"out": "x.json"}, "out"), ({"reload_every": 0}, "reload_every")):
        with pytest.raises(ValueError, match=match):
            LayoutConfig(**bad).validate()


@pytest.mark.slow
@pytest.mark.libero
def test_drawn_layouts_differ_and_an_init_state_renders_as_the_env_observes_it(tmp_path):
    pytest.importorskip("libero.libero")
    from envs.libero_env import LiberoEnv, LiberoEnvConfig
    from envs.outcome import pick_place_objects
    from robot_data.layouts import render_layouts

    drawn = render_layouts(LayoutConfig(out=str(tmp_path / "d.npz"), tasks=[0], per_task=3, reload_every=2),
                           progress=False)
    assert drawn["images"].shape == (3, 1, 64, 64, 3) and (drawn["init_state_id"] == -1).all()
    obj = drawn["object_pos"]
    assert np.linalg.norm(obj[1:, :2] - obj[:-1, :2], axis=1).min() > 1e-3  # each draw places the bowl anew
    assert np.abs(obj[:, :2] - obj[0, :2]).max() < 0.3  # ... on the same table
    assert not np.array_equal(drawn["images"][0], drawn["images"][1])

    official = render_layouts(LayoutConfig(out=str(tmp_path / "o.npz"), tasks=[0], init_state_ids=[3]), progress=False)
    env = LiberoEnv(LiberoEnvConfig(task_id=0, views=("agentview",), image_size=64, chunk_len=1, fast_render=True))
    try:
        # the reset seed render_layouts drew (the fixtures' placement, which init states leave to the reset)
        seed = int(np.random.default_rng(LayoutConfig().seed).integers(2**31))
        obs, _ = env.reset(seed=seed, options={"init_state_id": 3})
        objects = pick_place_objects(env.raw, env.raw_obs)
        assert objects is not None
        bowl = env.raw_obs[f"{objects[0]}_pos"]
    finally:
        env.close()
    np.testing.assert_array_equal(official["images"][0], obs["image"])
    np.testing.assert_allclose(official["object_pos"][0], bowl, atol=1e-6)
    back, infos = read_layouts([tmp_path / "o.npz"])
    np.testing.assert_array_equal(back["images"], official["images"])
    assert infos[0]["views"] == ["agentview"] and back["init_state_id"].tolist() == [3]
