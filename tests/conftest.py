"""Shared test set-up: headless MuJoCo rendering before anything imports mujoco; the fixtures of more than one
test folder (a local Ray cluster, real LIBERO)."""
import os

os.environ.setdefault("MUJOCO_GL", "egl")


import pytest  # noqa: E402  (after MUJOCO_GL is set above)


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
