"""imagination package."""
