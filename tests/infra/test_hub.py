"""The Hub layout (infra.hub): save_pretrained / from_pretrained of the world model (with its calibrated
success threshold), the proprio model and policies, to and from a local folder only (no network).

Round trips compare outputs, not only weights: a model that loads its weights into the wrong places, or
drops a buffer or the VLA's instruction embeddings (its extra state), predicts differently."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from infra.checkpoint import CheckpointError
from infra.hub import CARD, CONFIG, WEIGHTS
from infra.model_card import CardFacts
from policies.base import Policy, RandomPolicy, RandomPolicyConfig
from policies.vla import VLAPolicy
from tests.policies.conftest import INSTRUCTIONS, make_obs, tiny_config
from tests.world_models.conftest import SIZE, tiny_model_config
from world_models.model import WorldModel
from world_models.proprio import ProprioConfig, ProprioModel


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared
    yield
    torch.set_num_threads(n)


def _world_model() -> WorldModel:
    torch.manual_seed(0)
    wm = WorldModel(tiny_model_config()).eval()
    wm.cfg.head.success_threshold = 0.73  # as scripts/calibrate_success.py leaves it
    return wm


def _wm_outputs(wm: WorldModel) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    context = torch.rand(2, 2, 3, SIZE, SIZE, generator=g) * 2 - 1
    actions = torch.rand(2, 4, 7, generator=g) * 2 - 1
    return wm.predict(context, context[:, 0], actions, steps=2, generator=torch.Generator().manual_seed(2))


def test_world_model_round_trip_keeps_the_calibrated_head(tmp_path: Path):
    wm = _world_model()
    folder = wm.save_pretrained(tmp_path / "wm", CardFacts(data="outputs/data/x", preset="quick"))
    assert sorted(p.name for p in folder.iterdir()) == sorted([CARD, CONFIG, WEIGHTS])
    config = json.loads((folder / CONFIG).read_text())
    assert config["format"] == "wm-vla-rl/world_model" and config["config"]["head"]["success_threshold"] == 0.73
    back = WorldModel.from_pretrained(str(folder))
    assert asdict(back.cfg) == asdict(wm.cfg) and not back.training
    for a, b in zip(_wm_outputs(wm), _wm_outputs(back)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    card = (folder / CARD).read_text()
    assert card.startswith("---\nlibrary_name: wm-vla-rl") and "`outputs/data/x`" in card and "`quick`" in card
    assert "0.73" in card and "WorldModel.from_pretrained(" in card and "torch" in card


def test_latent_world_model_round_trip_keeps_its_frozen_autoencoder(tmp_path: Path):
    from world_models.autoencoder import AutoencoderConfig

    cfg = tiny_model_config()
    cfg.autoencoder = AutoencoderConfig(image_size=SIZE, block_out_channels=[8, 16], norm_num_groups=8,
                                        mid_block_attention=False, scaling_factor=0.7, shift_factor=0.1)
    torch.manual_seed(0)
    wm = WorldModel(cfg).eval()
    back = WorldModel.from_pretrained(wm.save_pretrained(tmp_path / "latent"))
    assert back.latent and asdict(back.cfg) == asdict(wm.cfg)
    for a, b in zip(_wm_outputs(wm), _wm_outputs(back)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_proprio_round_trip(tmp_path: Path):
    torch.manual_seed(0)
    model = ProprioModel(ProprioConfig(chunk_len=4, hidden=16, layers=2)).eval()
    model.state_mean.uniform_(-1, 1)  # buffers set by fit(): they must travel with the weights
    model.state_std.uniform_(0.5, 2)
    model.delta_std.uniform_(0.01, 0.1)
    back = ProprioModel.from_pretrained(model.save_pretrained(tmp_path / "proprio"))
    state, actions = torch.randn(3, 8), torch.rand(3, 4, 7) * 2 - 1
    torch.testing.assert_close(back.predict(state, actions), model.predict(state, actions), rtol=0, atol=0)
    assert back.cfg == model.cfg


def test_policy_round_trip_restores_its_class_and_instruction_embeddings(tmp_path: Path):
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(views=["agentview", "wrist"])).eval()
    # instruction embeddings the policy has used live in its extra state (no tensor key of its own); set
    # here directly so the test needs no sentence encoder
    policy.set_extra_state({"instructions": list(INSTRUCTIONS), "embeddings": torch.randn(len(INSTRUCTIONS), 384)})
    folder = policy.save_pretrained(tmp_path / "policy")
    back = Policy.from_pretrained(folder)
    assert type(back) is VLAPolicy and back.config == policy.config
    assert set(back.get_extra_state()["instructions"]) == set(INSTRUCTIONS)
    obs = make_obs(batch=2, size=16)
    torch.testing.assert_close(back.predict_action_chunk(obs), policy.predict_action_chunk(obs), rtol=0, atol=0)
    lp = policy.evaluate(obs, policy.predict_action_chunk(obs))[0]
    torch.testing.assert_close(back.evaluate(obs, back.predict_action_chunk(obs))[0], lp)
    rnd = Policy.from_pretrained(RandomPolicy(RandomPolicyConfig(chunk_len=3, seed=5)).save_pretrained(tmp_path / "r"))
    assert isinstance(rnd, RandomPolicy) and rnd.config.seed == 5


def test_pt_and_hub_checkpoints_load_the_same_model(tmp_path: Path):
    wm = _world_model()
    wm.save(tmp_path / "wm.pt")
    WorldModel.load(tmp_path / "wm.pt").save_pretrained(tmp_path / "hub")
    for a, b in zip(_wm_outputs(WorldModel.load(tmp_path / "wm.pt")), _wm_outputs(WorldModel.from_pretrained(
            tmp_path / "hub"))):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    return _world_model().save_pretrained(tmp_path_factory.mktemp("hub") / "wm")


def _copy(saved: Path, dest: Path) -> Path:
    dest.mkdir()
    for p in saved.iterdir():
        (dest / p.name).write_bytes(p.read_bytes())
    return dest


def _edit_config(folder: Path, edit) -> None:
    blob = json.loads((folder / CONFIG).read_text())
    edit(blob)
    (folder / CONFIG).write_text(json.dumps(blob))


@pytest.mark.parametrize("damage, match", [
    (lambda f: (f / CONFIG).unlink(), r"config\.json: missing from the world model folder"),
    (lambda f: (f / CONFIG).write_text("{not json"), r"config\.json: not readable JSON"),
    (lambda f: _edit_config(f, lambda b: b.update(format="wm-vla-rl/policy")), r"config\.json: not a world model"),
    (lambda f: _edit_config(f, lambda b: b.update(version=99)), r"config\.json: .*version 99 is not supported"),
    (lambda f: _edit_config(f, lambda b: b.pop("config")), r"config\.json: .*lacks \['config'\]"),
    (lambda f: _edit_config(f, lambda b: b["config"]["head"].update(bogus=1)),
     r"config\.json: its world model config is unusable .*bogus"),
    (lambda f: (f / WEIGHTS).write_bytes((f / WEIGHTS).read_bytes()[:100]), r"model\.safetensors: not a readable"),
    (lambda f: (f / WEIGHTS).unlink(), r"model\.safetensors: missing from the world model folder"),
])
def test_a_damaged_folder_gives_one_error_naming_file_and_field(saved: Path, tmp_path: Path, damage, match):
    folder = _copy(saved, tmp_path / "wm")
    damage(folder)
    with pytest.raises(CheckpointError, match=match):
        WorldModel.from_pretrained(folder)


def test_weights_of_another_model_name_the_weights_file(saved: Path, tmp_path: Path):
    other = ProprioModel(ProprioConfig()).save_pretrained(tmp_path / "proprio")
    folder = _copy(saved, tmp_path / "wm")
    (folder / WEIGHTS).write_bytes((other / WEIGHTS).read_bytes())
    with pytest.raises(CheckpointError, match=r"model\.safetensors: its world model state does not fit"):
        WorldModel.from_pretrained(folder)


def test_local_names_never_reach_the_network(tmp_path: Path, monkeypatch):
    import huggingface_hub

    def no_download(*args, **kwargs):
        raise AssertionError("a local path was sent to the Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    with pytest.raises(FileNotFoundError, match="no such world model folder"):
        WorldModel.from_pretrained(tmp_path / "missing")  # absolute path
    with pytest.raises(FileNotFoundError, match="no such world model folder"):
        WorldModel.from_pretrained("./outputs/missing")
    (tmp_path / "wm.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"wm\.pt: is a file; .*\.load"):
        WorldModel.from_pretrained(tmp_path / "wm.pt")


def test_a_repo_id_is_downloaded_and_an_unreachable_one_is_named(saved: Path, tmp_path: Path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, revision=None, allow_patterns=None):  # the Hub's cache folder, here a copy
        calls.append((repo_id, revision, allow_patterns))
        if repo_id == "owner/absent":
            raise huggingface_hub.errors.LocalEntryNotFoundError("offline and not cached")
        return str(saved)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    assert WorldModel.from_pretrained("owner/wm", revision="v1").cfg.head.success_threshold == 0.73
    assert calls[0][:2] == ("owner/wm", "v1") and CONFIG in calls[0][2] and WEIGHTS in calls[0][2]
    with pytest.raises(FileNotFoundError, match="owner/absent: no such local folder, and the Hub repo could not"):
        WorldModel.from_pretrained("owner/absent")
