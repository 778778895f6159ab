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

.PHONY: demo test lint bench-quick clean-venv
# collect -> world model -> BC -> imagined RL -> real eval -> one loop round; re-running resumes.
DEMO_ARGS ?=
demo: $(STAMPS)/installed
	$(PY) scripts/loop.py --config quick $(DEMO_ARGS)

# lint first (seconds; settings in pyproject.toml): ruff and mypy, both on the whole tree
test: lint
	$(PY) -m pytest -q -p no:cacheprovider

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
	$(PY) -m pip install -q -e '.[libero,dev]'
	@mkdir -p $(STAMPS) && touch $@

clean-venv:
	rm -rf $(VENV)
