"""Runnable benchmarks (``python -m bench.<name>`` from the repository root)."""
