"""Measurements of autorl itself, each a script run as `python benchmarks/perf/NAME.py`: speed against a baseline
measured in the same run (`perf_*.py`), whether training improves a model (`learning.py`, on `learning_tasks/`),
and the GPU path (`gpu_check.py`); each writes `results/NAME.json`. Shared helpers: `_common.py`."""
