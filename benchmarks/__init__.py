"""Benchmarks: `pipelines.benchmark`, the agent-variant benchmark behind `autorl benchmark` (a product feature),
and `benchmarks/perf/`, the performance and learning measurements of autorl itself (scripts and their results)."""
