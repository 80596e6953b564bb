"""A model's `config.json` written without its weights: what the vLLM-server option tests size a KV cache from."""

from __future__ import annotations

import json

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


def write_config(directory, config) -> None:
    (directory / "config.json").write_text(json.dumps(config))
