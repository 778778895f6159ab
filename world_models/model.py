"""`WorldModel`: the one interface the rest of the project uses (imagination env, evaluation, benches).

    wm = WorldModel(WorldModelConfig())
    frames, success_logits, done_logits = wm.predict(context, anchor, actions, steps=2)
    #   context [B, C, ch, H, W], anchor [B, ch, H, W] float in [-1, 1]; actions [B, K, 7] in [-1, 1]
    #   -> frames [B, K, ch, H, W] in [-1, 1] (the observations after each action), logits [B, K]
    wm.save("wm.pt"); wm = WorldModel.load("wm.pt")
    wm.save_pretrained("folder"); wm = WorldModel.from_pretrained("folder" or "owner/repo")   # Hub layout (infra.hub)

ch = 3 x views (agentview only by default). Frame k of the output is what the camera shows after
action k, i.e. the observation the policy sees before choosing action k+1.

Latent mode (`cfg.autoencoder` set, e.g. 128 px frames): the interface stays in pixels. `predict`
encodes context and anchor with the frozen autoencoder (world_models.autoencoder) to latents
[C_lat V, H/f, W/f], runs the same denoiser, sampler and heads on them and decodes the predicted
latents back to frames. `cfg.denoiser.image_size` / `channels` keep describing the frames the model
takes and returns; the denoiser itself is built for the latent size (`space_config`). `rollout` keeps
its sliding context in latent space and decodes once at the end.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from infra.checkpoint import CheckpointError, load_model_file, restore, save_model_file
from infra.hub import CONFIG, WEIGHTS, load_folder, save_folder
from infra.model_card import CardFacts, render_card
from infra.provenance import versions
from world_models.autoencoder import Autoencoder, AutoencoderConfig
from world_models.denoiser import Denoiser, DenoiserConfig
from world_models.heads import HeadConfig, SuccessDoneHead
from world_models.sampler import Sampler, SamplerConfig, check_guidance

_FORMAT = "wm-vla-rl/world_model"
_VERSION = 1


@dataclass
class WorldModelConfig:
    views: list[str] = field(default_factory=lambda: ["agentview"])  # stacked as channels, 3 per view
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    # latent mode: the frame autoencoder's config (its weights are part of the world model); None = pixel
    # space. Set from a trained autoencoder.pt by training's `autoencoder_from`, not by hand
    autoencoder: AutoencoderConfig | None = None

    @staticmethod
    def from_dict(d: dict) -> WorldModelConfig:
        den = dict(d["denoiser"])
        den.setdefault("residual_to", "last")  # checkpoints from before the switch were all relative to the last frame
        ae = d.get("autoencoder")  # absent from checkpoints written before the latent path: pixel space
        return WorldModelConfig(views=list(d["views"]), denoiser=DenoiserConfig(**den),
                                head=HeadConfig(**d["head"]), sampler=SamplerConfig(**d["sampler"]),
                                autoencoder=AutoencoderConfig(**ae) if ae else None)


def space_config(cfg: WorldModelConfig) -> DenoiserConfig:
    """The denoiser config in the space it runs in: cfg.denoiser itself in pixel mode; in latent mode its
    image size and channels replaced by the latents' (image_size / f, C_lat x views)."""
    ae = cfg.autoencoder
    if ae is None:
        return cfg.denoiser
    if ae.image_size != cfg.denoiser.image_size:
        raise ValueError(f"autoencoder.image_size = {ae.image_size} but denoiser.image_size = "
                         f"{cfg.denoiser.image_size}: the autoencoder must take the model's frames")
    return dataclasses.replace(cfg.denoiser, image_size=ae.latent_size,
                               channels=ae.latent_channels * len(cfg.views))


class WorldModel(nn.Module):
    """Denoiser + sampler + success/done head behind `predict` and `rollout`."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        if cfg.denoiser.channels != 3 * len(cfg.views):
            raise ValueError(f"denoiser.channels = {cfg.denoiser.channels} but views {cfg.views} give "
                             f"{3 * len(cfg.views)} channels (3 per view)")
        self.cfg = cfg
        space = space_config(cfg)
        # frozen: trained on its own (scripts/train_autoencoder.py); the world model only reads its latents
        self.autoencoder = Autoencoder(cfg.autoencoder).requires_grad_(False) if cfg.autoencoder else None
        self.denoiser = Denoiser(space, bounded=self.autoencoder is None)
        self.head = SuccessDoneHead(cfg.head, space.channels)
        self.sampler = Sampler(cfg.sampler)
        check_guidance(cfg.sampler.action_guidance, self.denoiser)

    @property
    def latent(self) -> bool:
        return self.autoencoder is not None

    @torch.no_grad()
    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames [..., ch, H, W] in [-1, 1] -> what the denoiser runs on: latents [..., C_lat V, h, w]
        in latent mode, the frames themselves in pixel mode."""
        return frames if self.autoencoder is None else self.autoencoder.encode(frames)

    @torch.no_grad()
    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of `encode`: frames [..., ch, H, W] clamped to [-1, 1]."""
        return x if self.autoencoder is None else self.autoencoder.decode(x).clamp(-1, 1)

    @torch.no_grad()
    def score_frames(self, frames: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads on given frames [B, K, ch, H, W] next to anchor [B, ch, H, W]: success/done logits [B, K]."""
        return self.head(self.encode(frames), self.encode(anchor))

    @property
    def context_frames(self) -> int:
        return self.cfg.denoiser.context_frames

    @property
    def chunk_len(self) -> int:
        return self.cfg.denoiser.chunk_len

    def set_scheduler(self, scheduler: str, steps: int | None = None) -> None:
        """Swap the sampling scheduler (see world_models.sampler.SCHEDULERS) without touching weights."""
        sc = dataclasses.replace(self.cfg.sampler, scheduler=scheduler,
                                 steps=self.cfg.sampler.steps if steps is None else steps)
        self.sampler = Sampler(sc)
        self.cfg = dataclasses.replace(self.cfg, sampler=sc)

    # ---------------------------------------------------------------- input checks
    def check_inputs(self, context: torch.Tensor, anchor: torch.Tensor, actions: torch.Tensor) -> None:
        d = self.cfg.denoiser
        frame = (d.channels, d.image_size, d.image_size)
        for name, x in (("context", context), ("anchor", anchor), ("actions", actions)):
            if not isinstance(x, torch.Tensor):
                raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
            if not x.is_floating_point():
                raise ValueError(f"{name}: expected a float tensor (frames in [-1, 1]; uint8 images go through "
                                 f"world_models.clips.to_model_frames), got dtype {x.dtype}")
        if context.ndim != 5 or tuple(context.shape[2:]) != frame:
            raise ValueError(f"context: expected [B, C={d.context_frames}, {frame[0]}, {frame[1]}, {frame[2]}] "
                             f"(image size {d.image_size}, {frame[0]} channels for views {self.cfg.views}), "
                             f"got {tuple(context.shape)}")
        if context.shape[1] != d.context_frames:
            raise ValueError(f"context: expected C = {d.context_frames} context frames, got {context.shape[1]} "
                             f"(shape {tuple(context.shape)}); pad a short history by repeating the first frame")
        B = context.shape[0]
        if tuple(anchor.shape) != (B, *frame):
            raise ValueError(f"anchor: expected [B={B}, {frame[0]}, {frame[1]}, {frame[2]}], got {tuple(anchor.shape)}")
        if actions.ndim != 3 or actions.shape[0] != B or actions.shape[2] != d.action_dim:
            raise ValueError(f"actions: expected [B={B}, K={d.chunk_len}, {d.action_dim}] (action dim {d.action_dim}), "
                             f"got {tuple(actions.shape)}")
        if actions.shape[1] != d.chunk_len:
            raise ValueError(f"actions: expected a chunk of K = {d.chunk_len} actions, got {actions.shape[1]}")

    # ---------------------------------------------------------------- prediction
    @torch.no_grad()
    def predict(self, context: torch.Tensor, anchor: torch.Tensor, actions: torch.Tensor, steps: int | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Next K frames [B, K, ch, H, W] in [-1, 1], success_logits [B, K], done_logits [B, K]."""
        self.check_inputs(context, anchor, actions)
        dtype = next(self.parameters()).dtype
        context, anchor, actions = context.to(dtype), anchor.to(dtype), actions.to(dtype)
        x, success, done = self.predict_encoded(self.encode(context), self.encode(anchor), actions, steps, generator)
        return self.decode(x), success, done

    @torch.no_grad()
    def predict_encoded(self, context: torch.Tensor, anchor: torch.Tensor, actions: torch.Tensor,
                        steps: int | None = None, generator: torch.Generator | None = None,
                        noise: torch.Tensor | None = None, guidance: float | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`predict` in the denoiser's space (latents in latent mode, unchecked): context [B, C, c, h, w],
        anchor [B, c, h, w] -> next K [B, K, c, h, w], success/done logits [B, K]. noise: the sampler's starting
        noise [B, K, c, h, w] (default: drawn from `generator`); guidance: the sampler's action guidance for this
        call (default: the model's own, sampler.action_guidance)."""
        x = self.sampler.sample(self.denoiser, context, anchor, actions, steps, generator, noise, guidance)
        success, done = self.head(x, anchor)
        return x, success, done

    @torch.no_grad()
    def rollout(self, first: torch.Tensor, anchor: torch.Tensor | None, actions: torch.Tensor, steps: int | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Open-loop prediction of a whole episode from its first frame(s) and its actions.

        first: the first observation [B, ch, H, W] (repeated C times, as clips pad the episode start)
        or a context [B, C, ch, H, W]; anchor defaults to the first frame; actions [B, T, 7], any T.
        Returns frames [B, T, ch, H, W] (observation after each action), success/done logits [B, T].
        The context window slides over the model's own predictions, never over real frames.
        """
        C, K = self.context_frames, self.chunk_len
        context = first[:, None].expand(-1, C, -1, -1, -1) if first.ndim == 4 else first
        anchor = context[:, 0] if anchor is None else anchor
        B, T = actions.shape[:2]
        pad = (-T) % K  # zero actions complete the last chunk; their frames are dropped
        acts = torch.cat([actions, actions.new_zeros(B, pad, actions.shape[2])], dim=1) if pad else actions
        if T + pad:
            self.check_inputs(context, anchor, acts[:, :K])
        dtype = next(self.parameters()).dtype
        # in latent mode the window slides over predicted latents: no decode/encode round trip per chunk
        context, anchor, acts = self.encode(context.to(dtype)), self.encode(anchor.to(dtype)), acts.to(dtype)
        frames, succ, done = [], [], []
        for start in range(0, T + pad, K):
            f, s, d = self.predict_encoded(context, anchor, acts[:, start:start + K], steps, generator)
            frames.append(f)
            succ.append(s)
            done.append(d)
            context = torch.cat([context, f], dim=1)[:, -C:]
        return self.decode(torch.cat(frames, 1)[:, :T]), torch.cat(succ, 1)[:, :T], torch.cat(done, 1)[:, :T]

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write config + weights atomically (infra.atomic)."""
        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        save_model_file(path, _FORMAT, asdict(self.cfg), state, _VERSION)

    @classmethod
    def load(cls, path: str | os.PathLike, map_location: str | torch.device = "cpu") -> WorldModel:
        """The model saved at `path` (WorldModel.save), in eval mode; CheckpointError naming `path` if unusable."""
        what = "world model checkpoint (WorldModel.save)"
        blob = load_model_file(path, what, _FORMAT, _VERSION, map_location)
        return cls._build(blob["config"], blob["state_dict"], path, path)

    @classmethod
    def _build(cls, config: dict, state: dict, config_path: str | os.PathLike, state_path: str | os.PathLike
               ) -> WorldModel:
        """The model of a stored config dict and state dict (in eval mode); errors name the file at fault."""
        try:
            cfg = WorldModelConfig.from_dict(config)
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{config_path}: its world model config is unusable ({type(err).__name__}: "
                                  f"{err})") from None
        model = cls(cfg)
        restore(model, state, state_path, "world model")
        return model.eval()

    def save_pretrained(self, folder: str | os.PathLike, facts: CardFacts | None = None) -> Path:
        """The Hub layout in `folder`: config.json (the config, the calibrated success threshold in
        head.success_threshold), model.safetensors, README.md (a model card stating `facts`)."""
        d = self.cfg.denoiser
        what = (f"An action-conditioned video world model (wm-vla-rl): {d.context_frames} context frames and "
                f"{d.chunk_len} actions in, the next {d.chunk_len} frames ({d.image_size} px, views "
                f"{', '.join(self.cfg.views)}) and per-frame success/done logits out. Success threshold on the "
                f"head's probability: {self.cfg.head.success_threshold:.4g}"
                + ("" if self.cfg.head.success_threshold != 0.5 else " (the default: not calibrated)") + ".")
        code = ("from world_models.model import WorldModel\n"
                "wm = WorldModel.from_pretrained({name})\n"
                "frames, success_logits, done_logits = wm.predict(context, anchor, actions)")
        card = render_card("World model", what, code, facts or CardFacts(), versions(), tags=["world-model"])
        return save_folder(folder, fmt=_FORMAT, version=_VERSION, config=asdict(self.cfg),
                           state_dict=self.state_dict(), card=card)

    @classmethod
    def from_pretrained(cls, folder_or_repo_id: str | os.PathLike, map_location: str | torch.device = "cpu",
                        revision: str | None = None) -> WorldModel:
        """The model of a save_pretrained folder, or of a Hub repo id (downloaded), in eval mode."""
        folder, blob, state = load_folder(folder_or_repo_id, "world model folder (WorldModel.save_pretrained)",
                                          _FORMAT, _VERSION, map_location=map_location, revision=revision)
        return cls._build(blob["config"], state, folder / CONFIG, folder / WEIGHTS)
