"""The policy contract every policy of the project follows (LeRobot-like), plus a uniform baseline.

A policy maps a *batched* observation dict to a chunk of K actions and never knows which env it runs
in (real LIBERO, the imagination env, a robot):

    obs["image"]        uint8   [B, V, H, W, 3]   views in a fixed order (agentview, wrist), upright
    obs["state"]        float32 [B, S]            eef pos (3), axis-angle (3), gripper qpos (2)
    obs["instruction"]  B strings (tuple/list)    the task's language instruction per env
    actions             float32 [B, K, 7] in [-1, 1]

numpy or torch inputs are accepted. Inference (`predict_action_chunk`, `select_action`, `sample`)
runs without gradients; `evaluate` keeps them for PPO/GRPO updates. `save` writes the class, config
and weights atomically; `Policy.load` restores the right subclass with its config.

A policy class of your own package loads too, once allowed explicitly (`_policy_class` says why): name its
module in the loading config's `policy_modules` (`Policy.load(..., modules=...)` imports them first), or
declare the class as an entry point of group POLICY_ENTRY_POINTS in your package. docs/policies.md shows it
end to end, with the contract imagined RL relies on (`Policy`'s docstring; `policies.gaussian` implements it
for Gaussian chunk heads).
"""
from __future__ import annotations

import abc
import importlib
import importlib.metadata
import math
import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from infra.checkpoint import MODEL_KEYS, CheckpointError, config_from, load_model_file, restore, save_model_file
from infra.hub import CONFIG, WEIGHTS, load_folder, save_folder
from infra.model_card import CardFacts, render_card
from infra.provenance import versions

ACTION_DIM = 7
_FORMAT = "wm-vla-rl/policy"
_VERSION = 1
_OBS_HELP = ("expected a batched observation dict: image uint8 [B, V, H, W, 3], state float32 [B, S], "
             "instruction a sequence of B strings")


class ObservationError(ValueError):
    """A policy input does not follow the observation convention (missing key, wrong shape/dtype)."""


@dataclass
class PolicyConfig:
    """Fields every policy config has."""

    chunk_len: int = 8  # K actions predicted per call
    n_action_steps: int = 0  # actions `select_action` executes per predicted chunk; 0 = chunk_len


def _tensor(x: Any) -> torch.Tensor:
    if isinstance(x, np.ndarray) and not (x.flags.writeable and x.flags.c_contiguous):
        x = np.array(x)  # torch cannot wrap read-only arrays (e.g. decoded video frames) without a copy
    return torch.as_tensor(x)


def batch_obs(obs: Mapping[str, Any], device: torch.device | str = "cpu") -> dict[str, Any]:
    """Validate a batched observation and convert it to tensors on `device`.

    Returns {"image": uint8 [B, V, H, W, 3], "state": float32 [B, S], "instruction": list of B str}.
    Raises ObservationError naming the key and the expected form.
    """
    if not isinstance(obs, Mapping):
        raise ObservationError(f"obs: got {type(obs).__name__}; {_OBS_HELP}")
    missing = [k for k in ("image", "state", "instruction") if k not in obs]
    if missing:
        raise ObservationError(f"obs: missing key(s) {missing}; {_OBS_HELP}")
    image = _tensor(obs["image"])
    if image.ndim != 5 or image.shape[-1] != 3:
        hint = " (a single env's observation: add a batch dimension)" if image.ndim == 4 else ""
        raise ObservationError(f"obs['image']: expected uint8 [B, V, H, W, 3], got shape {tuple(image.shape)}{hint}")
    if image.dtype != torch.uint8:
        raise ObservationError(f"obs['image']: expected dtype uint8 (0-255 pixels), got {image.dtype}")
    state = _tensor(obs["state"]).to(torch.float32)
    batch = image.shape[0]
    if state.ndim != 2 or state.shape[0] != batch:
        raise ObservationError(f"obs['state']: expected float32 [B={batch}, S], got shape {tuple(state.shape)}")
    text = obs["instruction"]
    if isinstance(text, str) or not isinstance(text, (Sequence, np.ndarray)):
        raise ObservationError(f"obs['instruction']: expected a sequence of {batch} strings, got {type(text).__name__}")
    text = [str(t) for t in text]
    if len(text) != batch:
        raise ObservationError(f"obs['instruction']: expected {batch} strings (one per env), got {len(text)}")
    return {"image": image.to(device), "state": state.to(device), "instruction": text}


def check_actions(actions: Any, batch: int, chunk_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Actions as float32 [B, K, 7] on `device`; ValueError on a wrong shape."""
    a = torch.as_tensor(actions, dtype=torch.float32, device=device)
    if a.shape != (batch, chunk_len, ACTION_DIM):
        raise ValueError(f"actions: expected float32 [B, K, 7] = [{batch}, {chunk_len}, {ACTION_DIM}], "
                         f"got {tuple(a.shape)}")
    return a


class Policy(nn.Module, abc.ABC):
    """Abstract policy. Subclasses set `config_class` and implement the three abstract methods.

    What imagined RL (imagination/rl: rollout, algo, training) relies on, and nothing else:

    * `sample(obs, generator)` -> (actions [B, K, 7] in [-1, 1], log_prob [B], value [B]), without gradients:
      the chunks the imagined episodes execute, drawn with `generator` only (a resumed run redraws them);
    * `evaluate(obs, actions, per_dim)` -> (log_prob, entropy [B], value [B]) with gradients, where
      log_prob is that of `sample`'s distribution at the current weights: for the actions `sample` returned,
      `evaluate` gives the same log_prob until the weights change (the first PPO/GRPO ratio is 1). It must
      be a deterministic function of (obs, actions, weights): the update, the KL reference and
      ratio "per_dim" evaluate the same samples again. per_dim=True: the log_prob per action dimension
      [B, K, 7], summing to the [B] one;
    * `noise_log_std()`: the parameter holding the log-std of `sample`'s Gaussian noise, which RL
      overwrites at the start of a run (ImagineRLConfig.init_log_std, exploration) and logs as `std`; None
      when the policy has none (RL then keeps its noise as it is). By default the `log_std` attribute;
    * `chunk_len` equal to the world model's; `config.views` (the views it reads, by name) and
      `config.image_size`, read when present; trainable `parameters()`; `train()`/`eval()`.

    The log-probability contract. A chunked Gaussian head (policies.gaussian.GaussianChunkPolicy, the built-in
    VLA) samples a = clip(mean + exp(log_std) * noise, -1, 1) per dimension and reports the log-density of
    that clipped Gaussian: N(mean, std) inside (-1, 1), the tail mass at each bound, summed over the K x 7
    dimensions. A policy with no tractable density of its own (diffusion, flow matching) follows the same
    contract by treating its deterministic sample (the denoising chain from fixed noise, or the ODE from
    zero noise, differentiable in its weights) as `mean` and adding Gaussian noise of a learned or fixed
    log_std around it: `log_prob` is the density of that Gaussian, not of the generative model. This is
    the contract RL needs (sample and evaluate agree, the ratio of two weights' log_probs is defined); it
    claims nothing about how well RL works with such a policy.
    `value` is a critic's estimate (PPO's GAE uses it); a policy without one returns zeros (GRPO ignores it).
    """

    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig

    def __init__(self, config: PolicyConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__}: expected a {self.config_class.__name__}, "
                            f"got {type(config).__name__}")
        if config.chunk_len < 1 or not 0 <= config.n_action_steps <= config.chunk_len:
            raise ValueError(f"chunk_len >= 1 and 0 <= n_action_steps <= chunk_len expected, got "
                             f"chunk_len={config.chunk_len}, n_action_steps={config.n_action_steps}")
        self.config = config
        self._queue: deque[torch.Tensor] = deque()

    # ------------------------------------------------------------------ properties
    @property
    def chunk_len(self) -> int:
        return self.config.chunk_len

    @property
    def n_action_steps(self) -> int:
        return self.config.n_action_steps or self.config.chunk_len

    @property
    def device(self) -> torch.device:
        p = next(self.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    # ------------------------------------------------------------------ contract
    def reset(self) -> None:
        """Start of an episode (of every env in the batch): forget queued actions."""
        self._queue.clear()

    @abc.abstractmethod
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """The policy's action chunk for `obs` (its deterministic choice) -> float32 [B, K, 7] in [-1, 1]."""

    @abc.abstractmethod
    def evaluate(self, obs: Mapping[str, Any], actions: Any, per_dim: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For RL updates: (log_prob [B], entropy [B], value [B]) of `actions` [B, K, 7] at `obs` (with grad).

        per_dim=True returns log_prob per action dimension, [B, K, 7] (summing it gives the [B] one),
        for updates that clip a ratio per dimension (imagination.rl.algo, "per_dim").
        """

    @abc.abstractmethod
    def sample(self, obs: Mapping[str, Any], generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For rollouts: (actions [B, K, 7] in [-1, 1], log_prob [B], value [B]); `evaluate` gives the same log_prob."""

    def noise_log_std(self) -> torch.Tensor | None:
        """The parameter holding the log-std of the Gaussian noise `sample` adds (broadcastable to [K, 7]: [K, 7]
        or [7]), or None for a policy without one. Imagined RL overwrites it in place at the start of a run
        (ImagineRLConfig.init_log_std and exploration) and logs exp(it).mean() as `std`. Default: the policy's
        `log_std` attribute when it is a tensor; a policy whose noise lives elsewhere overrides this."""
        value = getattr(self, "log_std", None)
        return value if isinstance(value, torch.Tensor) else None

    @torch.no_grad()
    def select_action(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """One action per env, float32 [B, 7]: pops a queue refilled with `n_action_steps` of a new chunk."""
        batch = batch_obs(obs)["image"].shape[0]
        if self._queue and self._queue[0].shape[0] != batch:
            raise ValueError(f"select_action: batch size changed from {self._queue[0].shape[0]} to {batch} "
                             "within an episode; call reset() first")
        if not self._queue:
            chunk = self.predict_action_chunk(obs)
            self._queue.extend(chunk[:, : self.n_action_steps].transpose(0, 1))  # n tensors [B, 7]
        return self._queue.popleft()

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write class, config and weights to `path` atomically (infra.atomic)."""
        save_model_file(path, _FORMAT, asdict(self.config), self.state_dict(), _VERSION,
                        **{"class": f"{type(self).__module__}:{type(self).__qualname__}"})

    @classmethod
    def load(cls, path: str | os.PathLike, map_location: str | torch.device = "cpu",
             modules: Sequence[str] = ()) -> Policy:
        """Restore the policy saved at `path` as its own class (a subclass of `cls`), in eval mode.

        modules: the caller's allow-list (a config's `policy_modules`): modules of the user's own package that
        define policy classes, imported first (`import_policy_modules`), so that their classes load. The
        checkpoint names its class; it never chooses what is imported (`_policy_class`)."""
        import_policy_modules(modules)
        what = "policy checkpoint (Policy.save)"
        payload = load_model_file(path, what, _FORMAT, _VERSION, map_location, ("class", *MODEL_KEYS))
        return cls._build(str(payload["class"]), payload["config"], payload["state_dict"], path, path, map_location)

    @classmethod
    def _build(cls, name: str, config: dict, state: dict, config_path: str | os.PathLike,
               state_path: str | os.PathLike, map_location: str | torch.device) -> Policy:
        """The policy of a stored class name, config dict and state dict, as its own class (a subclass of
        `cls`), in eval mode; errors name the file at fault."""
        obj = _policy_class(name, config_path)
        if not (isinstance(obj, type) and issubclass(obj, cls)):
            raise TypeError(f"{config_path}: holds a {name}, which is not a {cls.__name__}")
        names = {f.name for f in fields(obj.config_class)}
        unknown = sorted(set(config) - names)
        if unknown:
            raise CheckpointError(f"{config_path}: config fields {unknown} unknown to {obj.config_class.__name__}")
        policy = obj(config_from(obj.config_class, config, config_path, "policy"))
        restore(policy, state, state_path, "policy")
        return policy.to(map_location).eval()

    def save_pretrained(self, folder: str | os.PathLike, facts: CardFacts | None = None) -> Path:
        """The Hub layout in `folder`: config.json (class and config), model.safetensors, README.md (a model
        card stating `facts`). Loads back with `Policy.from_pretrained` as its own class."""
        what = (f"A {type(self).__name__} policy (wm-vla-rl): batched observations (images, proprio state, "
                f"instruction) in, chunks of {self.chunk_len} actions (7-D, in [-1, 1]) out, following the "
                "project's policy contract (policies/base.py).")
        code = ("from policies.base import Policy\n"
                "policy = Policy.from_pretrained({name})\n"
                "actions = policy.predict_action_chunk(obs)   # [B, K, 7]")
        card = render_card(f"Policy: {type(self).__name__}", what, code, facts or CardFacts(), versions(),
                           tags=["vla", "policy"])
        return save_folder(folder, fmt=_FORMAT, version=_VERSION, config=asdict(self.config),
                           state_dict=self.state_dict(), card=card,
                           extra={"class": f"{type(self).__module__}:{type(self).__qualname__}"})

    @classmethod
    def from_pretrained(cls, folder_or_repo_id: str | os.PathLike, map_location: str | torch.device = "cpu",
                        revision: str | None = None, modules: Sequence[str] = ()) -> Policy:
        """The policy of a save_pretrained folder, or of a Hub repo id (downloaded), as its own class, in eval
        mode. The class must be one of this project's or allowed (see `_policy_class`; `modules` as for `load`)."""
        import_policy_modules(modules)
        folder, blob, state = load_folder(folder_or_repo_id, "policy folder (Policy.save_pretrained)", _FORMAT,
                                          _VERSION, keys=("class", "config"), map_location=map_location,
                                          revision=revision)
        return cls._build(str(blob["class"]), blob["config"], state, folder / CONFIG, folder / WEIGHTS, map_location)


# packages whose modules Policy.load may import to find a checkpoint's class: this project's own
_OWN_PACKAGES = ("policies", "bench", "imagination", "world_models", "envs", "infra", "robot_data", "tests")
# the entry-point group in which an installed package declares its policy classes (setup.py's name, wm-vla-rl)
POLICY_ENTRY_POINTS = "wm_vla_rl.policies"
POLICY_MODULES_FIELD = "policy_modules"  # the configs' allow-list field (EvalConfig, ServeConfig, ImagineRLConfig)


def import_policy_modules(modules: Sequence[str], what: str = POLICY_MODULES_FIELD) -> None:
    """Import `modules`, the user's own modules that define policy classes (a config's `policy_modules`), so that
    `Policy.load` finds their classes among the modules already imported. The names come from the user's config
    or code, never from a checkpoint. ValueError naming `what` for a name that is no module name or that
    cannot be imported (the import's own error quoted)."""
    if isinstance(modules, str):  # a bare string would be imported letter by letter
        raise ValueError(f"{what}: expected a list of module names, got the string {modules!r}; "
                         f"write {what}=[{modules}]")
    for name in modules:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"{what}: {name!r} is not a module name (dotted, e.g. my_lab.policies)")
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ValueError(f"{what}: cannot import {name!r} ({type(err).__name__}: {err}); is its package "
                             "installed, or its folder on PYTHONPATH?") from err


def _entry_point_allows(module: str, qualname: str) -> bool:
    """Whether an installed package declares `module:qualname` (or all of `module`, an entry point with no
    attribute) in group POLICY_ENTRY_POINTS. Reads package metadata only: nothing is imported here."""
    for ep in importlib.metadata.entry_points(group=POLICY_ENTRY_POINTS):
        if ep.module == module and (ep.attr is None or ep.attr == qualname):
            return True
    return False


def _policy_class(name: str, path: str | os.PathLike) -> Any:
    """The object a checkpoint's "module:qualname" names. Why the check: importing a module runs its code,
    and the name comes from the file; only modules already imported, of this project's packages, or declared
    by an installed package as policy entry points (group POLICY_ENTRY_POINTS) are used. A user's own module
    is allowed explicitly, by the user: imported beforehand from a config's `policy_modules` (`Policy.load`'s
    `modules`), or declared as an entry point; never because a file names it."""
    module, _, qualname = name.partition(":")
    if (module not in sys.modules and module.split(".")[0] not in _OWN_PACKAGES
            and not _entry_point_allows(module, qualname)):
        raise CheckpointError(f"{path}: names the class {name!r}, outside this project's packages "
                              f"{list(_OWN_PACKAGES)}; refused (importing it would run its code). To allow a "
                              f"policy class of your own, name its module in the config's {POLICY_MODULES_FIELD} "
                              f"({POLICY_MODULES_FIELD}=[{module}]; Policy.load(..., modules=[...]) in code), which "
                              f"imports it before loading, or declare it as an entry point of group "
                              f"{POLICY_ENTRY_POINTS!r} in your package (docs/policies.md)")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise CheckpointError(f"{path}: names the class {name!r}, which cannot be found ({err})") from None
    return obj


@dataclass
class RandomPolicyConfig(PolicyConfig):
    seed: int = 0  # seeds the generator of predict_action_chunk, so a random baseline is reproducible


class RandomPolicy(Policy):
    """Uniform random actions in [-1, 1]: the baseline a trained policy must beat."""

    config_class = RandomPolicyConfig
    config: RandomPolicyConfig

    def __init__(self, config: RandomPolicyConfig | None = None):
        super().__init__(config or RandomPolicyConfig())
        self._generator = torch.Generator().manual_seed(self.config.seed)

    def _uniform(self, batch: int, generator: torch.Generator | None) -> torch.Tensor:
        u = torch.rand(batch, self.chunk_len, ACTION_DIM, generator=generator or self._generator)
        return u * 2.0 - 1.0

    def _log_density(self, batch: int) -> torch.Tensor:
        # uniform on [-1, 1]^(K*7): density 2^-(K*7) everywhere inside
        return torch.full((batch,), -self.chunk_len * ACTION_DIM * math.log(2.0))

    @torch.no_grad()
    def predict_action_chunk(self, obs: Mapping[str, Any]) -> torch.Tensor:
        return self._uniform(batch_obs(obs)["image"].shape[0], None)

    def evaluate(self, obs, actions, per_dim=False):
        b = batch_obs(obs)["image"].shape[0]
        a = check_actions(actions, b, self.chunk_len)
        if per_dim:
            return torch.where(a.abs() <= 1.0, -math.log(2.0), -math.inf), -self._log_density(b), torch.zeros(b)
        inside = (a.abs() <= 1.0).all(dim=(1, 2))
        log_prob = torch.where(inside, self._log_density(b), torch.full((b,), -math.inf))
        return log_prob, -self._log_density(b), torch.zeros(b)

    @torch.no_grad()
    def sample(self, obs, generator=None):
        b = batch_obs(obs)["image"].shape[0]
        return self._uniform(b, generator), self._log_density(b), torch.zeros(b)


__all__ = ["ACTION_DIM", "POLICY_ENTRY_POINTS", "POLICY_MODULES_FIELD", "ObservationError", "Policy", "PolicyConfig",
           "RandomPolicy", "RandomPolicyConfig", "batch_obs", "check_actions", "import_policy_modules"]
