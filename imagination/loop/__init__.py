"""The co-evolution loop: its configuration and bookkeeping (`config`), the stages it runs (`run`), the
inputs of the "grasp" reward it makes before RL (`grasp_inputs`, also bench/protocol.py's) and the report of a
finished run (`report`)."""
