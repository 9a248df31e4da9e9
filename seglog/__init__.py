"""The seglog command line and benchmarks."""
