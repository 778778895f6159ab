"""Thin entry points; each exposes main(cfg) for tests and a --help command line."""
