"""A task's inputs: generated with DSPy (generation.py), checked (checks.py), deduplicated and split
(dedup.py), read from and written to JSONL files (files.py)."""
