"""Export a checkpoint to the Hugging Face Hub layout (config.json, model.safetensors, README.md); push on request.

    python scripts/export_hub.py checkpoint=outputs/world_model/quick/world_model.pt out=outputs/hub/wm preset=quick
    python scripts/export_hub.py checkpoint=outputs/rl/quick/policy.pt out=outputs/hub/rl \\
        'results=[outputs/eval/rl_real/results.json]'
    python scripts/export_hub.py checkpoint=... out=... push=owner/name      # also upload (needs `hf auth login`)

The checkpoint's kind is read from the file: a world model (WorldModel.save, its calibrated success
threshold included), a proprio model (ProprioModel.save) or a policy (Policy.save). The folder loads
with `WorldModel.from_pretrained`, `ProprioModel.from_pretrained` or `Policy.from_pretrained`, given the
folder or, once pushed, the repo id. The model card (README.md) states the training data, the preset
and the figures measured for this checkpoint, read from the files our scripts write next to it
(config.yaml, split.json, calibration.json, eval/eval.json, result.json, results.json) and from
`results`; a world model's calibration.json is copied into the folder. Nothing is uploaded unless
`push` is set.
"""
from __future__ import annotations

from pathlib import Path

from imagination.export import ExportHubConfig, export_checkpoint
from infra.cli import run_script


def main(cfg: ExportHubConfig) -> Path:
    return export_checkpoint(cfg)


if __name__ == "__main__":
    run_script(main, ExportHubConfig, __doc__, group="export_hub")
