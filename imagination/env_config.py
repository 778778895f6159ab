"""The config of an imagined env (imagination/env.py `ImaginationVectorEnv`): the horizon, the sampler, what the
policy is shown, and the judge. Its own module, as imagination/rl/config.py is, so that the env's code reads on its
own; imagination.env exports it too."""
from __future__ import annotations

from dataclasses import dataclass, field

from imagination.keyframes import KeyframeConfig
from robot_data.dataset import ReaderConfig
from world_models.grasp_point import GraspPointConfig

UNCERTAINTY_MODES = ("off", "report", "truncate", "penalize")
OBSERVE_MODES = ("imagined", "recorded", "recorded_image")


@dataclass
class ImaginationConfig:
    max_steps: int = 220  # control steps of an episode, counted from the real episode's start
    # > 0: an imagined episode also ends this many steps after its keyframe (before max_steps). Why: from a
    # keyframe near the placement (keyframes.mode "release") the outcome is decided within tens of steps, and
    # imagining on to step 220 spends the world model where its frames no longer keep the outcome
    imagined_steps: int = 0
    success_threshold: float | None = None  # on sigmoid(success logit); None = the checkpoint's calibrated one
    sampling_steps: int | None = None  # denoising steps per chunk; None = the world model's default
    # the world model's action guidance (world_models/sampler.py SamplerConfig.action_guidance); 0 = the model's
    # own (1, none, unless it was saved with another). > 1 needs a model trained with denoiser.action_dropout
    action_guidance: float = 0.0
    # > 1: envs k*noise_group .. (k+1)*noise_group-1 share the world model's noise (common random numbers). Why:
    # imagined RL's GRPO groups are consecutive envs started from one keyframe; with the noise shared, what
    # differs within a group is what the actions did (how much of the spread the noise makes: docs/results.md,
    # "Adapting the start to the imagined frames")
    noise_group: int = 1
    keyframes: KeyframeConfig = field(default_factory=KeyframeConfig)
    # What the policy is shown: "imagined", the frame the world model imagined and the proprio model's state; or
    # "recorded", the start episode's own recorded frame and state at the same step (the last past its end), while
    # the world model imagines what the policy's actions do and the judge reads that. Why: a policy acting on its
    # own imagined frames drifts from its real trajectory chunk by chunk, and on LIBERO-Goal's bottle task the CPU
    # model's closed-loop windows rank real outcomes backwards where the same windows under the recorded actions
    # rank them well (docs/results.md, "The closed-loop check with the goal judge"); or "recorded_image", the
    # recorded frame with the proprio model's state. Why: on recorded states a policy changed by RL is shown where
    # its start's arm went, not where its own actions put it; the predicted state closes that part of the loop
    observe: str = "imagined"
    uncertainty: str = "off"  # off | report | truncate | penalize
    uncertainty_threshold: float = 0.08
    uncertainty_penalty: float = 0.5
    # The views obs["image"] shows the policy, a subset of the world model's (empty = all of them). Why: a
    # model can imagine a view the policy does not read (the wrist camera, where a grasp that misses by
    # 2 cm is plain to see) so that its success head judges from both, while the policy stays as trained.
    policy_views: list[str] = field(default_factory=list)
    # Where success comes from, one judge per module of imagination/rewards/: "head", the world model's success
    # head on the imagined frames; "state", a state reward that carries the goal's object along the proprio
    # model's robot states from the keyframe's simulator labels; "grasp", below. The head and the state reward
    # give 1.0 on success; "grasp" gives its probability.
    reward: str = "head"
    state_reward: str = ""  # StateReward checkpoint (scripts/train_state_reward.py); needed for reward "state"
    # Reward "grasp": the episode ends at the first chunk that commands the gripper shut, with reward P(success)
    # of a grasp-point classifier (world_models/grasp_point.py: where the predicted end effector is, relative to
    # the object's start, at that step) fit on these labelled recorded datasets and label-collection folders.
    # Why: on recorded robot states it ranks the BC policy's real outcomes at a within-task AUC of 0.97
    # (bench/reward_ceiling.py); the head and the state reward reach 0.36-0.66.
    # The judge is a trained artifact loaded by path: `grasp_judge`, a file of scripts/fit_grasp_judge.py. An RL run
    # given `grasp_train_data` and `grasp_label_dirs` instead fits that file into its out_dir first, its own step
    # (imagination/rewards/grasp.py `judge_for_run`); the env itself never fits.
    grasp_judge: str = ""
    grasp_train_data: list[str] = field(default_factory=list)
    grasp_label_dirs: list[str] = field(default_factory=list)
    # "close": end at the grasp, as above. "release": hold on to the first open command after it and judge the
    # grasp and where the carried object is let go (imagination/rewards/grasp.py).
    grasp_until: str = "close"
    # grasp_until "release": what an episode that never lets go is paid at the horizon, "read" (the judge there) or
    # "fail" (0). Why "fail": imagined RL learned to hold the bowl, read as placed (imagination/rewards/grasp.py)
    grasp_held: str = "read"
    grasp_point: GraspPointConfig = field(default_factory=GraspPointConfig)  # its classifier (ensemble, pessimism)
    # Reward "grasp": an object reader checkpoint (scripts/train_object_reader.py) that reads where the object and
    # its target start from each start episode's first frame; empty: from the start episodes' simulator labels.
    # Why: a real robot has the image, not the labels (world_models/object_reader.py)
    object_reader: str = ""
    # Reward "goal": a goal reader checkpoint (scripts/train_goal_reader.py) that reads from each imagined frame
    # whether the task's goal predicates hold (imagination/rewards/goal.py). It reads only imagined frames.
    goal_reader: str = ""
    # "horizon": every episode runs to the horizon and is paid its last frame's goal probability; "threshold": the
    # first frame past the success threshold ends it (imagination/rewards/goal.py says why horizon is the default)
    goal_until: str = "horizon"
    # what the goal judge pays: "probability", the goal's; "distance", exp(-d / goal_distance_scale) of the read
    # distance d (m) of each On/In predicate; "progress", each predicate's read progress placed between its start
    # and its goal, any kind of predicate (imagination/rewards/goal.py says why)
    goal_score: str = "probability"
    goal_distance_scale: float = 0.05
    # which features of a start dataset (start_data) are the views, the state and the action
    # (robot_data.dataset.ReaderConfig), e.g. imagination.features.cameras={agentview: observation.images.image};
    # the defaults map them automatically
    features: ReaderConfig = field(default_factory=ReaderConfig)
    device: str = "cpu"


__all__ = ["OBSERVE_MODES", "UNCERTAINTY_MODES", "ImaginationConfig"]
