"""Robot data: the recorded episodes and what makes them, on top of the environments of `envs`: the episode
dataset in the LeRobot v3 layout (`dataset/`), the scripted and perturbed experts (`experts/`), their collection
into a dataset, locally or on Ray (`collection.py`, `recording.py`, `ray_collection.py`), the simulator and
goal-predicate labels of recorded episodes (`sim_labels.py`, `label_collection.py`, `goal_labels.py`) and the
scene layouts the object reader trains on (`layouts.py`). `envs` never imports this package."""
