# Two commands on a fresh machine:  make demo   (the whole pipeline and one loop round, report in
# outputs/demo/report.html)   make test
# Both create/reuse .venv and install what they need first (apt: headless Mesa EGL/OSMesa; pip).
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMPS  := $(VENV)/.stamps
PYTHON  ?= python3
# llvmpipe software rendering through EGL: MuJoCo renders headless without a GPU or a display.
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl
APT_PKGS := libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6

.PHONY: demo test lint bench-quick clean-venv interop-venvs lerobot-venv openpi-venv ffmpeg-apt
# collect -> world model -> BC -> imagined RL -> real eval -> one loop round; re-running resumes.
DEMO_ARGS ?=
demo: $(STAMPS)/installed
	$(PY) scripts/loop.py --config grasp $(DEMO_ARGS)

# lint first (seconds; settings in pyproject.toml): ruff and mypy, both on the whole tree.
# Two pytest-xdist workers, one test file each at a time (module fixtures stay in one process): most slow
# tests are one-threaded (rendering, subprocess start-up, imports), so two of them fill a 2-core machine.
# The 25 slowest are listed at the end: CI has a 30-minute budget, and the list says where it goes. The files
# of tests/slowest_files.txt go first (tests/conftest.py), in that order, not in xdist's (tests per file).
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: $(STAMPS)/installed
	$(PY) -m ruff check .
	$(PY) -m mypy

bench-quick: $(STAMPS)/installed
	$(PY) bench/sim_speed.py --quick
	$(PY) bench/expert.py --quick

$(STAMPS)/apt:
	@if ldconfig -p | grep -q libEGL_mesa && ldconfig -p | grep -q libOSMesa; then \
		echo "Mesa EGL/OSMesa already installed"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PKGS); \
	else \
		echo "error: headless rendering needs the Debian packages: $(APT_PKGS) (run as root: apt-get install $(APT_PKGS))"; exit 1; \
	fi
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/installed: setup.py $(STAMPS)/apt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU build on disk; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[libero,cluster,dev]'
	@mkdir -p $(STAMPS) && touch $@

# Side venvs for the interop tests (tests/interop.py runs code in them in a subprocess): other projects'
# packages whose pins our venv cannot take. Without them those tests are skipped; .ci/run builds them.
LEROBOT_VENV ?= .venv-lerobot
OPENPI_VENV  ?= .venv-openpi
# the newest lerobot 0.4.x (0.4.x is what Python 3.11 allows); its datasets are the LeRobot v3.0 layout
LEROBOT_VERSION := 0.4.4
# bump when the lerobot venv's recipe below changes, so that existing venvs are rebuilt
LEROBOT_VENV_REV := 4
OPENPI_CLIENT_VERSION := 0.1.2
interop-venvs: lerobot-venv openpi-venv
lerobot-venv: $(LEROBOT_VENV)/.installed-$(LEROBOT_VERSION)-$(LEROBOT_VENV_REV)
openpi-venv: $(OPENPI_VENV)/.installed-$(OPENPI_CLIENT_VERSION)

# lerobot 0.4.4 pins torch<2.11, torchvision<0.26 and av<16. The PyTorch CPU index is not reachable from
# our machines and PyPI's Linux torchvision wheels link the CUDA build of torch, so this is PyPI's torch
# 2.10 with its nvidia libraries (~7 GB unpacked; runs on CPU). uv installs that in ~1 min where pip
# takes 3-4.5 min (measured). lerobot itself goes in --no-deps, with only the dependencies its dataset
# code imports (lerobot.datasets: datasets, huggingface-hub, accelerate, av, packaging, jsonlines, and
# torchcodec, its default video decoder; bounds copied from lerobot's metadata): not wandb, rerun, opencv,
# cmake, pynput. torchcodec loads FFmpeg's shared libraries from the system: Debian's `ffmpeg` package
# brings them (apt, as root, like the Mesa packages above). numpy<2.4: lerobot 0.4.4 records a shape-[1]
# feature (next.reward) through float(array of shape [1]), which numpy 2.4 refuses. The second line adds what
# its policies (ACT, diffusion) and their processors import, for scripts/serve_lerobot_policy.py, plus the
# websocket server, msgpack and omegaconf of our wire format and script entry point; bounds copied from lerobot's metadata.
# lerobot's video decoder (torchcodec) loads FFmpeg's shared libraries. A rule of its own, so that .ci/run installs
# every apt package before the pip installs run side by side (two apt-gets at once would fight over dpkg's lock).
ffmpeg-apt:
	@if ldconfig -p | grep -q 'libavdevice\.so' && ldconfig -p | grep -q 'libavfilter\.so'; then \
		echo "FFmpeg shared libraries already installed"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg; \
	else \
		echo "error: lerobot's video decoder (torchcodec) needs FFmpeg's shared libraries (run as root: apt-get install ffmpeg)"; exit 1; \
	fi

$(LEROBOT_VENV)/.installed-$(LEROBOT_VERSION)-$(LEROBOT_VENV_REV): | ffmpeg-apt
	rm -rf $(LEROBOT_VENV)
	$(PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/pip install -q uv==0.13.9
	$(LEROBOT_VENV)/bin/uv pip install -q --python $(LEROBOT_VENV)/bin/python torch==2.10.0 torchvision==0.25.0 \
		'datasets>=4.0.0,<5.0.0' 'huggingface-hub>=0.34.2,<0.36.0' 'accelerate>=1.10.0,<2.0.0' 'av>=15.0.0,<16.0.0' \
		'packaging>=24.2,<26.0' 'jsonlines>=4.0.0,<5.0.0' 'torchcodec>=0.2.1,<0.11.0' 'numpy<2.4' \
		'draccus==0.10.0' 'einops>=0.8.0,<0.9.0' 'diffusers>=0.27.2,<0.36.0' 'deepdiff>=7.0.1,<9.0.0' \
		'imageio>=2.34.0,<3.0.0' 'gymnasium>=1.1.1,<2.0.0' 'pyserial>=3.5,<4.0' 'termcolor>=2.4.0,<4.0.0' \
		'websockets>=13' 'msgpack>=1.0' 'omegaconf>=2.3,<2.4'
	$(LEROBOT_VENV)/bin/uv pip install -q --python $(LEROBOT_VENV)/bin/python --no-deps lerobot==$(LEROBOT_VERSION)
	touch $@

# openpi-client pins numpy<2 (ours is 2.x), so it gets a venv of its own (seconds). typing_extensions:
# its websocket client imports it without declaring it.
$(OPENPI_VENV)/.installed-$(OPENPI_CLIENT_VERSION):
	rm -rf $(OPENPI_VENV)
	$(PYTHON) -m venv $(OPENPI_VENV)
	$(OPENPI_VENV)/bin/pip install -q openpi-client==$(OPENPI_CLIENT_VERSION) typing_extensions
	touch $@

clean-venv:
	rm -rf $(VENV) $(LEROBOT_VENV) $(OPENPI_VENV)
