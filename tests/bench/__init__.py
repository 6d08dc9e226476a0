"""Benchmarks of the gateway against raw baselines (not collected by pytest).

Run them all with ``python -m tests.bench`` (``--quick`` for a smoke run); see README.md
in this directory and docs/performance.md for the figures.
"""
