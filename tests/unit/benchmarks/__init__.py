"""Tests of the pure parts of benchmarks/."""
