"""Model cards (README.md of a Hub folder): what a checkpoint is, what it was trained on, what was measured.

    facts = gather_facts(Path("outputs/world_model/quick/world_model.pt"), preset="quick")
    text = render_card("World model", "from world_models.model import WorldModel\\n...", facts, provenance(0))

The facts come from the files our scripts write next to a checkpoint, read when present and skipped
when not: config.yaml (the training config: its data), split.json (the world model's train/held-out
episodes), calibration.json (the success head's threshold and balanced accuracy), eval/eval.json (open-loop
fidelity), result.json (BC or imagined-RL training), results.json (a policy evaluation), plus any results
files named explicitly. Why only files: the card states measured figures, never defaults or guesses; a
figure that was not measured for this checkpoint is absent, and the card says the preset was not recorded
rather than guess it (the training config does not keep the preset's name).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.provenance import versions_line

# (file next to the checkpoint, {figure name: dotted key in that file}); figures missing from a file are skipped
_FIGURES: tuple[tuple[str, dict[str, str]], ...] = (
    ("calibration.json", {"success threshold (calibrated)": "threshold",
                          "balanced accuracy at the threshold": "balanced_accuracy",
                          "balanced accuracy at 0.5": "balanced_accuracy_at_default",
                          "calibration episodes: real successes": "positives",
                          "calibration episodes: real failures": "negatives"}),
    ("eval/eval.json", {"open-loop PSNR (dB)": "psnr", "open-loop SSIM": "ssim", "success F1 (imagined frames)":
                        "success_f1", "episode success F1": "episode_success_f1"}),
    ("result.json", {"BC steps": "steps", "BC final loss": "final_loss", "RL algorithm": "algo",
                     "RL iterations": "iterations", "imagined success, first iteration": "first.imagined_success_rate",
                     "imagined success, last iteration": "last.imagined_success_rate",
                     "held-out imagined success (best)": "heldout.best_success"}),
    ("results.json", {"evaluation env": "env", "success rate": "overall.success_rate", "successes": "overall.successes",
                      "episodes": "overall.episodes", "95% interval": "overall.ci95"}),
)
# where the training data is named: config.yaml keys (world model, BC, imagined RL), then other files' keys
_DATA_KEYS = (("config.yaml", "clips.data_dir"), ("config.yaml", "data_dir"), ("config.yaml", "start_data"),
              ("split.json", "data_dir"), ("calibration.json", "data_dir"))


@dataclass
class CardFacts:
    """What a card states about one checkpoint; None = not known."""

    data: str | None = None  # the training data: a dataset folder, or a Hub dataset id
    preset: str | None = None  # the configs/ preset it was trained with
    figures: list[tuple[str, str, str]] = field(default_factory=list)  # (figure, value, file it is read from)
    repo_id: str | None = None  # where it is published; the card's load example names it


def _read(path: Path) -> Any:
    """A JSON or YAML file's content; None when absent or unreadable (a card is written all the same)."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError):
        return None


def _get(blob: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(blob, dict) or part not in blob:
            return None
        blob = blob[part]
    return blob


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, list)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value) if isinstance(value, int) else ("nan" if math.isnan(value) else f"{value:.4g}")


def gather_facts(checkpoint: str | Path, preset: str | None = None, data: str | None = None,
                 results: Sequence[str | Path] = ()) -> CardFacts:
    """The facts of the files next to `checkpoint` (a file, or a folder holding the run) and of `results`
    (more results.json / result.json / calibration.json files, e.g. a real evaluation run elsewhere)."""
    ckpt = Path(checkpoint)
    folder = ckpt if ckpt.is_dir() else ckpt.parent
    facts = CardFacts(data=data, preset=preset)
    named = [(folder / name, keys) for name, keys in _FIGURES]
    for extra in map(Path, results):
        keys = next((k for name, k in _FIGURES if Path(name).name == extra.name), None)
        if keys is None:  # any other JSON file: its results.json-like figures, if it has them
            keys = dict(_FIGURES[-1][1])
        named.append((extra, keys))
    for path, keys in named:
        blob = _read(path)
        for figure, dotted in keys.items():
            value = _get(blob, dotted)
            if value is not None and not isinstance(value, dict):
                facts.figures.append((figure, _fmt(value), str(path)))
    if facts.data is None:
        facts.data = next((str(v) for name, key in _DATA_KEYS if (v := _get(_read(folder / name), key))), None)
    return facts


def render_card(title: str, description: str, load_code: str, facts: CardFacts, provenance: dict[str, Any],
                tags: Sequence[str] = ()) -> str:
    """README.md text: Hub metadata (YAML front matter), then what it is, how to load it (`load_code`, whose
    "{name}" becomes the repo id when known), its data, preset, measured figures and the versions that wrote it."""
    from huggingface_hub import ModelCardData

    load_code = load_code.replace("{name}", repr(facts.repo_id or "path/to/folder or owner/repo"))
    meta = ModelCardData(library_name="wm-vla-rl", tags=["robotics", "libero", "wm-vla-rl", *tags])
    lines = ["---", meta.to_yaml(), "---", "", f"# {title}", "", description, "", "## Load", "",
             "```python", load_code.strip(), "```", "",
             "Needs this project installed (`pip install -e .` from its repository).", "", "## Training", "",
             f"- data: {f'`{facts.data}`' if facts.data else 'not recorded'}",
             f"- preset: {f'`{facts.preset}`' if facts.preset else 'not recorded'}", "", "## Measured figures", ""]
    if facts.figures:
        lines += ["| figure | value | from |", "|---|---|---|"]
        lines += [f"| {name} | {value} | `{Path(src).name}` |" for name, value, src in facts.figures]
    else:
        lines.append("None recorded next to the checkpoint.")
    lines += ["", "## Versions", "", f"Exported with {versions_line(provenance)}.", ""]
    return "\n".join(lines)


__all__ = ["CardFacts", "gather_facts", "render_card"]
