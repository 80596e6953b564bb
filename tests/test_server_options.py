"""The vLLM server's speed options, as command lines: merged-LoRA serving and the in-process CPU model;
and which running server an embedded judge may reuse."""

import subprocess

import pytest
import torch

from autorl import vllm_server
from autorl.errors import AutoRLError
from autorl.vllm_server import ServerConfig, VLLMServer, running_server_for


def command(tmp_path, **config) -> list[str]:
    server = VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(**config))
    server.port = 8000
    return server.command()


def test_merged_mode_starts_vllm_without_lora_support_and_only_on_loopback(tmp_path):
    assert "--enable-lora" not in command(tmp_path, lora_serving="merged")
    assert "--enable-lora" in command(tmp_path, lora_serving="adapter")
    with pytest.raises(AutoRLError, match="loopback"):
        VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(lora_serving="merged", host="0.0.0.0")).start()
    with pytest.raises(AutoRLError, match="lora_serving"):
        VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(lora_serving="adapter")).load_merged(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the in-process executor is a CPU-only option")
def test_on_cpu_the_model_runs_in_the_engine_process_unless_told_otherwise(tmp_path):
    uni = ["--distributed-executor-backend", "uni"]
    default = command(tmp_path)
    assert default[default.index("--distributed-executor-backend") :][:2] == uni
    assert "--distributed-executor-backend" not in command(tmp_path, cpu_in_process=False)
    chosen = command(tmp_path, extra_args=["--distributed-executor-backend", "mp"])
    assert chosen.count("--distributed-executor-backend") == 1 and chosen[-1] == "mp"


@pytest.mark.parametrize("cuda", [False, True])
def test_auto_serving_merges_on_cpu_and_uses_adapters_on_cuda_or_off_loopback(monkeypatch, cuda):
    monkeypatch.setattr(vllm_server, "cuda_available", lambda: cuda)
    assert ServerConfig().serves_merged() is not cuda
    assert ServerConfig(host="0.0.0.0").serves_merged() is False
    assert ServerConfig(lora_serving="adapter").serves_merged() is False
    assert ServerConfig(lora_serving="merged").serves_merged() is True


def test_a_judge_reuses_only_servers_whose_served_name_stays_the_base_weights(tmp_path):
    servers = {
        mode: VLLMServer(tmp_path, "m", tmp_path / f"{mode}.log", ServerConfig(lora_serving=mode))
        for mode in ("merged", "adapter")
    }
    try:
        for server in servers.values():  # a live process stands in for vLLM: only `running` is asked
            server._process = subprocess.Popen(["sleep", "60"])
        vllm_server._live_servers.add(servers["merged"])
        assert running_server_for(tmp_path) is None  # a training step would swap its weights
        vllm_server._live_servers.add(servers["adapter"])
        assert running_server_for(tmp_path) is servers["adapter"]
        vllm_server._shared_servers[tmp_path.resolve()] = servers["merged"]  # embedded_endpoint's own
        assert running_server_for(tmp_path) is servers["merged"]
    finally:
        vllm_server._shared_servers.pop(tmp_path.resolve(), None)
        for server in servers.values():
            server.stop()


def test_merged_weights_go_to_dev_shm_only_when_it_has_room():
    assert vllm_server._memory_dir(10**15) is None  # a petabyte: the default temporary directory instead
