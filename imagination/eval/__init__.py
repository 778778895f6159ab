"""Policy evaluation shared by real LIBERO and imagination: the job types (`jobs`), the scheduler
(`evaluate`), the real adapters (`libero`, `real_rollouts`: record real episodes into the dataset), the
imagined one (`imagined`), and the checks of the imagined reward against real outcomes (`calibrate`,
`closed_loop`, `reward_gate`, `stats`)."""
