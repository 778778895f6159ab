"""RL inside the world model: the GRPO/PPO update (`algo`), imagined rollouts (`rollout`), the
held-out early stop (`early_stop`) and the training run that ties them together (`training`)."""
