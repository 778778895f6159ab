"""The judges of imagined episodes, one module each, behind one protocol (`base.Reward`), which the imagination env
calls once per step: `head` (the world model's success head), `state` (a state reward carrying the goal's object),
`grasp` (a grasp-point classifier at the first close). `base.build_reward` maps `ImaginationConfig.reward` to one."""
