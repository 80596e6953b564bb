"""What tests of vLLM servers share: a model's `config.json` written without its weights (what the vLLM-server option
tests size a KV cache from), and a running server's own counters (`vllm_metric`; the judge-replica benchmark reads
them too)."""

from __future__ import annotations

import json
import re

import httpx

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


def write_config(directory, config) -> None:
    (directory / "config.json").write_text(json.dumps(config))


def vllm_metric(url: str, name: str, key: str) -> int:
    """A counter or gauge of the vLLM server at `url` (without /v1) from its Prometheus metrics (`vllm:NAME`),
    summed over its labels: what the server itself counted (requests answered, tokens generated, ...). `key`:
    the server's key (`VLLMServer.api_key`, a replica's `Replica.key`), which its /metrics needs too."""
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    response.raise_for_status()
    text = response.text
    return int(sum(float(v) for v in re.findall(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", text, re.M)))
