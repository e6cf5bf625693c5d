"""Benchmarks: speed as ratios against a peer measured in the same run (never asserted in tests)."""
