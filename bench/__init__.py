"""Benchmarks (``make bench``): figures beside a baseline measured in the same run."""
