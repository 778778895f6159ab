"""Checkpoints in the Hugging Face Hub layout: a folder with config.json, model.safetensors and README.md.

    folder = save_folder(out, fmt="wm-vla-rl/world_model", version=1, config=asdict(cfg),
                         state_dict=model.state_dict(), card=card_text)
    folder, blob, state = load_folder("user/repo" or "path/to/folder", "world model folder", fmt, version)

Why this layout: it is what the Hub's file viewer, model cards and `huggingface_hub` downloads expect, and
what users of other VLA-RL projects ask for (released reward / world models). The weights are safetensors,
which hold tensors only: loading one runs no code, the same guarantee `infra.checkpoint.load_torch` gives
our .pt files. config.json carries the same "format"/"version" tags and config dict as our .pt
checkpoints, and is checked by the same `expect_format`, so a wrong or damaged folder gets one error
naming the file and the field, as the .pt loaders do.

Why not `huggingface_hub.PyTorchModelHubMixin`: it rebuilds a model from its __init__ keyword arguments,
while ours take nested config dataclasses (WorldModelConfig holds DenoiserConfig, HeadConfig, ...) and a
policy folder must restore its own subclass; our loaders already validate all of that. Only the download
is taken from huggingface_hub (`snapshot_download`), and only for a name that is not a local folder.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from infra.atomic import atomic_write, atomic_write_json, atomic_write_text
from infra.checkpoint import CheckpointError, check_safetensors, expect_format
from infra.provenance import versions

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
# the files a download fetches: the three above and the JSON figures a card quotes (calibration.json)
_DOWNLOAD = [CONFIG, WEIGHTS, CARD, "*.json"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # "owner/name", as the Hub spells repo ids


def save_folder(folder: str | os.PathLike, *, fmt: str, version: int | None, config: dict,
                state_dict: dict[str, torch.Tensor], card: str, extra: dict[str, Any] | None = None) -> Path:
    """Write config.json ({"format", "version", **extra, "config", "exported_with"}), model.safetensors and
    README.md into `folder` (created), each atomically; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder}: exists and is not a folder (save_pretrained writes a folder)")
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    # non-tensor entries (a module's get_extra_state, e.g. the VLA's instruction embeddings): their tensors
    # go to the weights file, the rest (strings, numbers) to config.json's "state_extras"
    extras = {k: _split(v, k, tensors) for k, v in state_dict.items() if not isinstance(v, torch.Tensor)}
    for k, v in state_dict.items():
        if isinstance(v, torch.Tensor):
            tensors[k] = v
    # clone: safetensors refuses tensors that share memory (tied or sliced weights); contiguous, on the CPU
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    atomic_write(folder / WEIGHTS, lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    blob = {"format": fmt, **({"version": version} if version is not None else {}), **(extra or {}),
            "config": config, **({"state_extras": extras} if extras else {}),
            "exported_with": versions()}  # what wrote it (infra.provenance); loading does not depend on it
    atomic_write_json(folder / CONFIG, blob, indent=2)
    atomic_write_text(folder / CARD, card)
    return folder


def resolve(folder_or_repo_id: str | os.PathLike, what: str, revision: str | None = None) -> Path:
    """A local folder as it is; a Hub repo id ("owner/name") downloaded (cached) by huggingface_hub.

    A path that exists but is a file, or a name that is neither a folder nor a repo id, is refused with
    an error naming it: a typo in a local path must not turn into a network request."""
    path = Path(folder_or_repo_id)
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path}: is a file; {what} is a folder holding {CONFIG} and {WEIGHTS} "
                              f"(a .pt checkpoint loads with .load)")
    name = str(folder_or_repo_id)
    if not _REPO_ID.match(name) or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"{name}: no such {what} folder (and not a Hub repo id 'owner/name')")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id=name, revision=revision, allow_patterns=_DOWNLOAD))
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as err:
        # not a local folder either: say both, since a missing local folder also looks like "owner/name"
        raise FileNotFoundError(f"{name}: no such local folder, and the Hub repo could not be fetched "
                                f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None


def load_folder(folder_or_repo_id: str | os.PathLike, what: str, fmt: str, version: int | None,
                keys: tuple[str, ...] = ("config",), map_location: str | torch.device = "cpu",
                revision: str | None = None) -> tuple[Path, dict, dict[str, torch.Tensor]]:
    """(folder, config.json's content, the weights) of a save_folder folder, checked: config.json readable
    JSON with format `fmt`, `keys` and `version`; model.safetensors complete. Errors name the file."""
    from safetensors.torch import load_file

    folder = resolve(folder_or_repo_id, what, revision)
    config_path = folder / CONFIG
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: missing from the {what}")
    try:
        blob = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_path}: not readable JSON ({err})") from None
    expect_format(blob, config_path, what, fmt, keys, version)
    if not isinstance(blob["config"], dict):
        raise CheckpointError(f"{config_path}: field 'config' is a {type(blob['config']).__name__}, expected an "
                              "object of config fields")
    weights = folder / WEIGHTS
    check_safetensors(weights, what)
    device = str(map_location) if isinstance(map_location, torch.device) else map_location
    tensors = load_file(str(weights), device=device)
    extras = blob.get("state_extras") or {}
    try:
        state = {**{k: v for k, v in tensors.items() if k.partition(_SEP)[0] not in extras},
                 **{k: _join(v, tensors) for k, v in extras.items()}}
    except KeyError as err:
        raise CheckpointError(f"{config_path}: field 'state_extras' names tensor {err} that {WEIGHTS} lacks") from None
    return folder, blob, state


_SEP = "/"  # between a state entry's key and the path of a tensor inside it ("_extra_state/embeddings")


def _split(value: Any, name: str, tensors: dict[str, torch.Tensor]) -> Any:
    """`value` as JSON data, its tensors moved into `tensors` under `name`/path and replaced by
    {"__tensor__": key}."""
    if isinstance(value, torch.Tensor):
        tensors[name] = value
        return {"__tensor__": name}
    if isinstance(value, dict):
        return {str(k): _split(v, f"{name}{_SEP}{k}", tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split(v, f"{name}{_SEP}{i}", tensors) for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"state entry {name}: a {type(value).__name__} cannot be saved to the Hub layout "
                    "(tensors, dicts, lists, strings and numbers only)")


def _join(data: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of `_split`."""
    if isinstance(data, dict):
        if set(data) == {"__tensor__"}:
            return tensors[data["__tensor__"]]
        return {k: _join(v, tensors) for k, v in data.items()}
    if isinstance(data, list):
        return [_join(v, tensors) for v in data]
    return data


def push_folder(folder: str | os.PathLike, repo_id: str, private: bool = False, message: str = "") -> str:
    """Upload `folder` to the Hub model repo `repo_id` (created if needed; needs a login or HF_TOKEN).
    Returns the commit's URL. Never called by the tests: it is the one step that needs the network."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                             commit_message=message or f"Upload {Path(folder).name} (wm-vla-rl)")
    return str(getattr(info, "commit_url", info))


__all__ = ["CARD", "CONFIG", "WEIGHTS", "load_folder", "push_folder", "resolve", "save_folder"]
