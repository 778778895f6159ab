"""The object reader (world_models/object_reader.py) on drawn scenes: a square whose pixel position is the
object's, another the target's. It learns where they are below a pixel's width on layouts it never saw, keeps
each task's mapping apart, survives a save and load, and refuses what it cannot read."""
import numpy as np
import pytest
import torch

from world_models.object_reader import ObjectReader, ObjectReaderConfig, fit_object_reader, reader_errors

S = 24  # image size
PX = 0.01  # metres per pixel: the squares' positions map to the world at 1 cm a pixel


def _scenes(n: int, seed: int, tasks=(3, 7)):
    """n images uint8 [n, S, S, 3]: a red 3x3 square at the object's pixel, a green one at the target's; task 7's
    world is shifted 0.5 m in x, so only a reader that keeps the tasks apart reads both."""
    rng = np.random.default_rng(seed)
    images = np.full((n, S, S, 3), 40, np.uint8)
    task = rng.choice(tasks, n)
    obj_px, tgt_px = rng.uniform(3, S - 4, (n, 2)), rng.uniform(3, S - 4, (n, 2))
    for k in range(n):
        for px, colour in ((obj_px[k], (220, 30, 30)), (tgt_px[k], (30, 220, 30))):
            r, c = np.round(px).astype(int)
            images[k, r - 1:r + 2, c - 1:c + 2] = colour
    shift = np.where(task == 7, 0.5, 0.0)[:, None]

    def world(px):  # the pixel a square was drawn at (rounded), in metres, at a fixed height
        return np.c_[np.round(px[:, 1]) * PX + shift[:, 0], np.round(px[:, 0]) * PX, np.full(n, 0.9)]

    return images, task, world(obj_px).astype(np.float32), world(tgt_px).astype(np.float32)


@pytest.fixture(scope="module")
def reader():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    images, task, obj, tgt = _scenes(600, seed=0)
    return fit_object_reader(images, task, obj, tgt, "libero_spatial",
                             ObjectReaderConfig(channels=[16, 32, 32], keypoints=16, steps=600, batch_size=32,
                                                lr=3e-3, jitter=0.0), progress=False)


def test_the_reader_finds_objects_in_layouts_it_never_saw(reader):
    images, task, obj, tgt = _scenes(100, seed=1)
    e = reader_errors(reader, images, task, obj, tgt)
    # a guess of each task's mean position is off by ~6 cm; a reader that reads the image, by under a pixel (1 cm)
    guess = np.median(np.linalg.norm(obj - obj.mean(0) - np.where(task == 7, 0.25, -0.25)[:, None] * [1, 0, 0],
                                     axis=1)) * 100
    assert guess > 4.0
    assert e["object_cm_median"] < 1.0 and e["target_cm_median"] < 1.0, e
    read_obj, read_tgt = reader.read(images[:4], task[:4])
    assert read_obj.shape == (4, 3) and read_obj.dtype == np.float32
    np.testing.assert_allclose(read_obj[:, 2], 0.9, atol=0.01)


def test_a_saved_reader_reads_the_same(reader, tmp_path):
    images, task, _, _ = _scenes(8, seed=2)
    reader.save(tmp_path / "reader.pt")
    again = ObjectReader.load(tmp_path / "reader.pt")
    assert (again.suite, again.tasks, again.image_size) == ("libero_spatial", [3, 7], S)
    for a, b in zip(reader.read(images, task), again.read(images, task)):
        np.testing.assert_array_equal(a, b)


def test_the_reader_refuses_unknown_tasks_and_other_images(reader):
    images, task, _, _ = _scenes(2, seed=3)
    with pytest.raises(ValueError, match=r"tasks \[5\]"):
        reader.read(images, np.array([3, 5]))
    with pytest.raises(ValueError, match=r"expected images uint8 \[N, 24, 24, 3\]"):
        reader.read(images[:, :16], task)
    with pytest.raises(ValueError, match="multiples of 8"):
        fit_object_reader(images, task, np.zeros((2, 3)), np.zeros((2, 3)), "x", ObjectReaderConfig(channels=[12]))


def test_a_stopped_fit_resumes_to_the_same_weights(tmp_path, monkeypatch):
    import world_models.object_reader as module

    images, task, obj, tgt = _scenes(40, seed=3)
    cfg = ObjectReaderConfig(channels=[8, 8], keypoints=8, steps=6, batch_size=8, jitter=0.05)
    whole = fit_object_reader(images, task, obj, tgt, "libero_spatial", cfg, progress=False)
    save, saved = module._save_fit, []

    def save_then_stop(path, cfg, n, step, *rest):  # the process dies right after its step-4 checkpoint
        save(path, cfg, n, step, *rest)
        saved.append(step)
        if step == 4:
            raise KeyboardInterrupt

    ck = tmp_path / "checkpoint.pt"
    monkeypatch.setattr(module, "_save_fit", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        fit_object_reader(images, task, obj, tgt, "libero_spatial", cfg, progress=False, checkpoint=ck,
                          checkpoint_every=2)
    torch.manual_seed(123)  # the global RNG moved on meanwhile: the checkpoint's state must win
    resumed = fit_object_reader(images, task, obj, tgt, "libero_spatial", cfg, progress=False, checkpoint=ck,
                                checkpoint_every=2)
    assert saved == [2, 4, 6]  # the second run went on from step 4, not from the start
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, msg=name)
    with pytest.raises(ValueError, match="another reader config"):  # never continue a different fit
        fit_object_reader(images, task, obj, tgt, "libero_spatial", ObjectReaderConfig(channels=[8, 8], keypoints=8,
                          steps=8, batch_size=8), progress=False, checkpoint=ck)
