"""Serving models: the vLLM server process (vllm_server.py, its settings in config.py, its memory in
memory.py), the embedded model and its shared server (embedded.py), LoRAs merged into the weights (merge.py),
and the supervisor no server outlives (die_with_parent.py)."""
