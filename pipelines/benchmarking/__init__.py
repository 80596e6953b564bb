"""`autorl benchmark`: agent variants answer the same held-out inputs and a judge scores them head to head.

`variants` says what a variant name means, `answers` has the variants answer (cached), `head_to_head`
judges the answers and runs the whole benchmark, `scoreboard` makes the tables, win rates and chart.
Named for what the command does (benchmarking agent variants, `autorl benchmark`), apart from `benchmarks/`,
the measurements of autorl itself.
"""
