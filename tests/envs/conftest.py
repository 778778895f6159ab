"""Fixtures shared by the env tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def libero():
    """envs.libero_suites, after skipping the test when real LIBERO (the [libero] extra) is not installed."""
    pytest.importorskip("libero.libero")
    from envs import libero_suites

    return libero_suites
