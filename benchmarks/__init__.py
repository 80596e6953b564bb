"""Benchmarks: the agent-variant benchmark behind `autorl benchmark` (`head_to_head`, `variants`,
`scoreboard`) and the performance scripts (`perf_*.py`)."""
