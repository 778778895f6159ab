"""Shared test set-up: headless MuJoCo rendering before anything imports mujoco."""
import os

os.environ.setdefault("MUJOCO_GL", "egl")
