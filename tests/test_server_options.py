"""The vLLM server's speed options, as command lines: merged-LoRA serving and the in-process CPU model."""

import pytest
import torch

from autorl.errors import AutoRLError
from autorl.vllm_server import ServerConfig, VLLMServer


def command(tmp_path, **config) -> list[str]:
    server = VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(**config))
    server.port = 8000
    return server.command()


def test_merged_mode_starts_vllm_without_lora_support_and_only_on_loopback(tmp_path):
    assert "--enable-lora" not in command(tmp_path, lora_serving="merged")
    assert "--enable-lora" in command(tmp_path)
    with pytest.raises(AutoRLError, match="loopback"):
        VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(lora_serving="merged", host="0.0.0.0")).start()
    with pytest.raises(AutoRLError, match="lora_serving"):
        VLLMServer(tmp_path, "m", tmp_path / "log").load_merged(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the in-process executor is a CPU-only option")
def test_on_cpu_the_model_runs_in_the_engine_process_unless_told_otherwise(tmp_path):
    uni = ["--distributed-executor-backend", "uni"]
    default = command(tmp_path)
    assert default[default.index("--distributed-executor-backend") :][:2] == uni
    assert "--distributed-executor-backend" not in command(tmp_path, cpu_in_process=False)
    chosen = command(tmp_path, extra_args=["--distributed-executor-backend", "mp"])
    assert chosen.count("--distributed-executor-backend") == 1 and chosen[-1] == "mp"
