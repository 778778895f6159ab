"""Policy evaluation shared by real LIBERO and imagination: the job types (`jobs`), the scheduler
(`evaluate`), the real adapters (`libero`, and `real_rollouts`: record real episodes into the dataset),
the imagined one (`imagined`), and the checks of the imagined reward against real outcomes (`calibrate`,
`closed_loop`, `closed_loop_check`, `reward_gate`, `state_reward`, `stats`)."""
