"""Export a saved checkpoint to the Hugging Face Hub layout (scripts/export_hub.py): a world model, a proprio
model or a policy, the kind read from the file, with a model card from the files next to it.

Here rather than in infra/ (which holds the layout itself, infra.hub, and the card, infra.model_card) because
this is the package that sees both world models and policies; infra sits below them.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from infra.checkpoint import CheckpointError, load_torch
from infra.hub import push_folder
from infra.model_card import gather_facts

# the "format" tag of each kind of .pt checkpoint -> what loads it
KINDS = {"wm-vla-rl/world_model": "world model", "wm-vla-rl/proprio_model": "proprio model",
         "wm-vla-rl/policy": "policy"}


@dataclass
class ExportHubConfig:
    checkpoint: str = ""  # a .pt file written by WorldModel.save, ProprioModel.save or Policy.save
    out: str = ""  # the folder to write (created; its three files are replaced)
    push: str = ""  # a Hub repo id (owner/name) to upload the folder to; "" = local only (no network)
    private: bool = False  # with push: create the repo private
    preset: str = ""  # the configs/ preset the checkpoint was trained with, for the card ("" = not recorded)
    data: str = ""  # the training data named on the card; "" = read from the files next to the checkpoint
    # more results files the card quotes (e.g. a real LIBERO evaluation of this policy, run elsewhere)
    results: list[str] = field(default_factory=list)
    # modules of your own package that define the policy's class, imported before it loads (docs/policies.md)
    policy_modules: list[str] = field(default_factory=list)


def checkpoint_kind(path: str | Path) -> str:
    """"world model", "proprio model" or "policy": the kind a .pt checkpoint's format tag names."""
    blob = load_torch(path, "checkpoint", mmap=True)  # mapped, not read: the right loader reads it next
    fmt = blob.get("format") if isinstance(blob, dict) else None
    if fmt not in KINDS:
        raise CheckpointError(f"{path}: format {fmt!r} is none of {sorted(KINDS)} (a world model, proprio model "
                              "or policy checkpoint written by this project)")
    return KINDS[fmt]


def export_checkpoint(cfg: ExportHubConfig) -> Path:
    """Write cfg.checkpoint into cfg.out in the Hub layout (push it when cfg.push is set); returns the folder."""
    if not cfg.checkpoint or not cfg.out:
        raise ValueError("checkpoint and out: both needed (checkpoint=FILE.pt out=FOLDER)")
    missing = [r for r in cfg.results if not Path(r).is_file()]
    if missing:
        raise FileNotFoundError(f"results: {missing} not found")
    kind = checkpoint_kind(cfg.checkpoint)
    facts = gather_facts(cfg.checkpoint, preset=cfg.preset or None, data=cfg.data or None, results=cfg.results)
    facts.repo_id = cfg.push or None
    out = Path(cfg.out)
    if kind == "world model":
        from world_models.model import WorldModel

        WorldModel.load(cfg.checkpoint).save_pretrained(out, facts)
        calibration = Path(cfg.checkpoint).parent / "calibration.json"
        if calibration.is_file():  # every replayed episode's figure behind the card's threshold
            shutil.copyfile(calibration, out / "calibration.json")
    elif kind == "proprio model":
        from world_models.proprio import ProprioModel

        ProprioModel.load(cfg.checkpoint).save_pretrained(out, facts)
    else:
        from policies.base import Policy

        Policy.load(cfg.checkpoint, modules=cfg.policy_modules).save_pretrained(out, facts)
    print(f"{kind} {cfg.checkpoint} -> {out} ({len(facts.figures)} measured figures on the card)")
    if cfg.push:
        url = push_folder(out, cfg.push, private=cfg.private, message=f"Upload {kind} from {Path(cfg.checkpoint).name}")
        print(f"pushed to {cfg.push}: {url}")
    return out


__all__ = ["KINDS", "ExportHubConfig", "checkpoint_kind", "export_checkpoint"]
