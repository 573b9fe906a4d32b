"""Benchmarks; the entry point is ``python -m bench.core`` from the repository root."""
