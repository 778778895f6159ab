"""Shared test set-up: headless MuJoCo rendering before anything imports mujoco; the fixtures of more than one
test folder (a local Ray cluster, real LIBERO, the square world's trained models)."""
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")


import pytest  # noqa: E402  (after MUJOCO_GL is set above)

SLOWEST = Path(__file__).with_name("slowest_files.txt")


def pytest_collection_modifyitems(config, items):
    """The files of slowest_files.txt first, in its order; every other file after them, in collection order.
    Why: `make test` hands whole files to two xdist workers as they free up (--no-loadscope-reorder keeps this
    order), and the run ends when the worker that drew the last long file does."""
    root = Path(str(config.rootpath))
    lines = [ln.strip() for ln in SLOWEST.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    rank = {str(root / ln): k for k, ln in enumerate(lines)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU Ray cluster for one test module (the [cluster] extra; skipped without it)."""
    ray = pytest.importorskip("ray", reason="the [cluster] extra (ray) is not installed: pip install -e '.[cluster]'")
    # Ray runs its workers at niceness 15, so any CPU-bound job beside the suite starves them and a Ray test that
    # takes minutes alone stalls. The raylet started here reads this; its workers then compete as the other tests'
    # processes do.
    os.environ["RAY_worker_niceness"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def libero():
    """envs.libero_suites, after skipping the test when real LIBERO (the [libero] extra) is not installed
    (the experts' and labels' tests, tests/robot_data/)."""
    pytest.importorskip("libero.libero")
    from envs import libero_suites

    return libero_suites


def _build_square_setup(root: Path) -> None:
    """The square world's dataset, a tiny world model trained 500 steps and a small proprio model, under root."""
    from robot_data.dataset import EpisodeDataset
    from tests.world_models.conftest import tiny_train_config, write_square_dataset
    from world_models.proprio import ProprioConfig, fit_proprio
    from world_models.training import Trainer

    data = write_square_dataset(root / "data", episodes=8, T=32)
    cfg = tiny_train_config(data, root / "wm", steps=500)
    cfg.augment.enabled = False
    cfg.bootstrap.enabled = False
    # The square travels across the whole frame, so the first frame is a poor reference: from it, a
    # 500-step tiny model does not learn the motion well enough for RL to find the goal (measured:
    # imagined success 0.375 before and after). LIBERO scenes are mostly static; there the anchor wins.
    cfg.model.denoiser.residual_to = "last"
    trainer = Trainer(cfg)
    for _ in range(cfg.steps):
        trainer.step()
    trainer.unwrapped().eval().save(root / "wm.pt")
    episodes = EpisodeDataset(data, verify=False)
    proprio, _ = fit_proprio([episodes[i].state for i in range(len(episodes))],
                             [episodes[i].action for i in range(len(episodes))],
                             ProprioConfig(chunk_len=4, hidden=32, layers=1, steps=100))
    proprio.save(root / "proprio.pt")


@pytest.fixture(scope="session")
def square_setup(tmp_path_factory, worker_id):
    """(dataset, world model file, policy file, proprio file) of the square world (tests/world_models/conftest.py):
    a tiny world model trained 500 steps, an untrained VLA, a small proprio model (the square world has no
    proprio: it stays at zero). Built once per test run: the xdist workers share it through a file lock (three test
    files in two folders read it; each built its own). Nothing may write into it."""
    import torch
    from filelock import FileLock

    from policies.vla import VLAConfig, VLAPolicy
    from tests.world_models.conftest import SIZE

    torch.set_num_threads(1)
    # each worker's basetemp is a child of this run's own folder; without xdist, basetemp is that folder
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    root = shared / "square_setup"
    with FileLock(str(root) + ".lock"):
        built = (root / "done").is_file()
        if not built:
            root.mkdir(parents=True, exist_ok=True)
            _build_square_setup(root)
        # the policy is made in every worker, so that the global RNG leaves the fixture in the same state in each
        torch.manual_seed(0)
        policy = VLAPolicy(VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4, conv_channels=[8, 16],
                                     image_features=16, language_features=8, state_features=8, hidden=32))
        if not built:
            policy.save(root / "policy.pt")
            (root / "done").touch()
    return root / "data", root / "wm.pt", root / "policy.pt", root / "proprio.pt"
