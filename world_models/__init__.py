"""world_models package."""
