"""Benchmarks with PASS/FAIL lines, run as files (python bench/rl_gain.py) or modules (python -m bench.rl_gain)."""
