"""Action-conditioned video world model: imagine the next K frames of a robot episode from its actions.

    from world_models.model import WorldModel
    wm = WorldModel.load("outputs/world_model/quick/world_model.pt")
    frames, success_logits, done_logits = wm.predict(context, anchor, actions, steps=2)
    # context [B, C, ch, H, W], anchor [B, ch, H, W]: float frames in [-1, 1] (ch = 3 x views);
    # actions [B, K, 7] in [-1, 1]  ->  frames [B, K, ch, H, W], logits [B, K]
    frames, s, d = wm.rollout(first_frame, None, episode_actions)   # a whole episode, open loop

Modules (each with its config dataclass):
    clips.py     ClipConfig, ClipSampler: C context + K target frames, anchor, actions, success/done
                 labels from an in-memory EpisodeDataset; episode-level held-out split
    denoiser.py  DenoiserConfig, Denoiser: EDM-preconditioned diffusers.UNet2DModel predicting the K
                 frames jointly (as residuals from the anchor frame by default), action planes per frame
                 + action MLP embedding added to the noise embedding
    sampler.py   SamplerConfig, Sampler: diffusers EDMEulerScheduler or FlowMatchEulerDiscreteScheduler
                 over the same denoiser (1-3 steps at rollout)
    heads.py     HeadConfig, SuccessDoneHead: per-frame success and termination logits
    model.py     WorldModelConfig, WorldModel: predict / rollout / save / load
    autoencoder.py  AutoencoderConfig, Autoencoder: diffusers AutoencoderKL for the latent path (128 px
                 and up): frames [..., 3V, H, W] <-> scaled latents [..., C_lat V, H/8, W/8]
    autoencoder_training.py  TrainAutoencoderConfig, train_autoencoder: resumable, held-out PSNR / SSIM
    augment.py   StyleAugConfig: per-clip photometric style augmentation (structure kept)
    losses.py    BootstrapConfig, WorldModelObjective: EDM loss + head BCE; dynamic latent bootstrapping
    training.py  TrainWorldModelConfig, Trainer, train: accelerate loop, tensorboard, exact resume
    metrics.py   PSNR / SSIM per frame (torchmetrics), F1

Entry points: scripts/train_autoencoder.py, scripts/train_world_model.py, scripts/eval_world_model.py; benchmarks:
bench/wm_fidelity.py, bench/wm_speed.py. Nothing here imports from imagination/ or policies/.
"""
