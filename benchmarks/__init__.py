"""Measurements of autorl itself, not installed: `perf/` (the performance and learning scripts and their
results) and `tests/` (the benchmarks' own tests). The agent-variant benchmark behind `autorl benchmark`, a product
feature, is `pipelines.benchmarking`."""
