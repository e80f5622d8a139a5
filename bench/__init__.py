"""Benchmarks: one command each (``python -m bench.<name>``); results in ``docs/benchmarks.md``."""
