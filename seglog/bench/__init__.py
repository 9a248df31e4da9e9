"""`seglog bench ...`: benchmarks that measure ratios against a baseline run in the same process."""
