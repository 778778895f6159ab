"""scripts/export_hub.py (imagination.export): a saved checkpoint of each kind into the Hub layout, with
a model card stating the data, preset and figures measured next to it; local folders only (no push)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from imagination.export import ExportHubConfig, checkpoint_kind, export_checkpoint
from infra.atomic import atomic_torch_save
from infra.checkpoint import CheckpointError
from infra.hub import CARD
from policies.base import Policy
from policies.vla import VLAPolicy
from tests.policies.conftest import make_obs, tiny_config
from tests.world_models.conftest import tiny_model_config
from world_models.model import WorldModel
from world_models.proprio import ProprioConfig, ProprioModel

REPO = Path(__file__).resolve().parents[2]


def _world_model_run(run: Path) -> Path:
    """A world-model run folder as train_world_model.py + calibrate_success.py + eval_world_model.py leave it."""
    torch.manual_seed(0)
    wm = WorldModel(tiny_model_config())
    wm.cfg.head.success_threshold = 0.61
    run.mkdir(parents=True)
    wm.save(run / "world_model.pt")
    (run / "config.yaml").write_text(yaml.safe_dump({"clips": {"data_dir": "outputs/data/spatial64"}, "steps": 3}))
    (run / "calibration.json").write_text(json.dumps({"threshold": 0.61, "balanced_accuracy": 0.875,
                                                      "balanced_accuracy_at_default": 0.5, "positives": 12,
                                                      "negatives": 6, "episodes": []}))
    (run / "eval").mkdir()
    (run / "eval" / "eval.json").write_text(json.dumps({"psnr": 24.123456, "ssim": 0.81, "success_f1": 0.7}))
    return run / "world_model.pt"


def test_world_model_export_with_its_calibration_and_card(tmp_path: Path):
    ckpt = _world_model_run(tmp_path / "run")
    out = export_checkpoint(ExportHubConfig(checkpoint=str(ckpt), out=str(tmp_path / "hub"), preset="gpu64"))
    back, original = WorldModel.from_pretrained(out), WorldModel.load(ckpt)
    assert back.cfg.head.success_threshold == 0.61
    for name, tensor in original.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, rtol=0, atol=0)
    assert json.loads((out / "calibration.json").read_text())["balanced_accuracy"] == 0.875
    card = (out / CARD).read_text()
    for text in ("data: `outputs/data/spatial64`", "preset: `gpu64`", "| success threshold (calibrated) | 0.61 |",
                 "| balanced accuracy at the threshold | 0.875 | `calibration.json` |",
                 "| open-loop PSNR (dB) | 24.12 |"):
        assert text in card, text


def test_policy_export_quotes_a_named_evaluation(tmp_path: Path):
    run = tmp_path / "rl"
    run.mkdir()
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config())
    policy.save(run / "policy.pt")
    (run / "result.json").write_text(json.dumps({"algo": "grpo", "iterations": 40,
                                                 "last": {"imagined_success_rate": 0.625}}))
    (run / "config.yaml").write_text(yaml.safe_dump({"start_data": "outputs/data/x", "policy": "bc.pt"}))
    real = tmp_path / "eval" / "results.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"env": "libero_spatial", "overall": {"success_rate": 0.4, "successes": 20,
                                                                    "episodes": 50, "ci95": [0.276, 0.538]}}))
    out = export_checkpoint(ExportHubConfig(checkpoint=str(run / "policy.pt"), out=str(tmp_path / "hub"),
                                            results=[str(real)], push=""))
    card = (out / CARD).read_text()
    for text in ("| RL algorithm | grpo |", "| imagined success, last iteration | 0.625 |", "| success rate | 0.4 |",
                 "| 95% interval | [0.276, 0.538] |", "data: `outputs/data/x`", "preset: not recorded"):
        assert text in card, text
    obs = make_obs(batch=2, size=16)
    back = Policy.from_pretrained(out)
    torch.testing.assert_close(back.predict_action_chunk(obs), Policy.load(run / "policy.pt").predict_action_chunk(obs))


def test_kinds_and_refusals(tmp_path: Path):
    ProprioModel(ProprioConfig(hidden=8, layers=1)).save(tmp_path / "proprio.pt")
    assert checkpoint_kind(tmp_path / "proprio.pt") == "proprio model"
    out = export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "proprio.pt"), out=str(tmp_path / "p")))
    assert ProprioModel.from_pretrained(out).cfg.hidden == 8
    atomic_torch_save(tmp_path / "other.pt", {"format": "someone/else", "state_dict": {}})
    with pytest.raises(CheckpointError, match=r"other\.pt: format 'someone/else' is none of"):
        checkpoint_kind(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="results"):
        export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "proprio.pt"), out=str(tmp_path / "q"),
                                          results=[str(tmp_path / "absent.json")]))


def test_the_script_reports_a_bad_checkpoint_in_one_line(tmp_path: Path):
    (tmp_path / "empty.pt").write_bytes(b"")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "export_hub.py"), f"checkpoint={tmp_path}/empty.pt",
                           f"out={tmp_path}/hub"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "empty.pt: empty file" in done.stderr and not (tmp_path / "hub").exists()


def test_push_is_opt_in_and_uploads_the_folder(tmp_path: Path, monkeypatch):
    # a stand-in for the Hub client: the upload itself needs the network and an account, which tests have not
    import huggingface_hub

    calls: list[tuple[str, dict]] = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", {"repo_id": repo_id, **kw}))

        def upload_folder(self, **kw):
            calls.append(("upload_folder", kw))
            return "https://huggingface.co/owner/proprio/commit/abc"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    ProprioModel(ProprioConfig(hidden=8, layers=1)).save(tmp_path / "proprio.pt")
    export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "proprio.pt"), out=str(tmp_path / "local")))
    assert calls == []  # no push unless asked
    out = export_checkpoint(ExportHubConfig(checkpoint=str(tmp_path / "proprio.pt"), out=str(tmp_path / "hub"),
                                            push="owner/proprio", private=True))
    assert [c[0] for c in calls] == ["create_repo", "upload_folder"]
    assert calls[0][1]["private"] is True and calls[0][1]["exist_ok"] is True
    assert calls[1][1]["repo_id"] == "owner/proprio" and calls[1][1]["folder_path"] == str(out)
    assert "ProprioModel.from_pretrained('owner/proprio')" in (out / CARD).read_text()
