"""Robot deployment: the robot-arm interface (simulated and LeRobot), client-side safety limits, the
policy client and the fixed-rate control loop with its watchdog."""
