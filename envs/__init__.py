"""Real environments (LIBERO), scripted experts and the episode dataset."""
