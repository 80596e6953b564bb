"""The vLLM server's options, as command lines: merged-LoRA serving, the in-process CPU model, the KV cache
sized in bytes; and which running server an embedded judge may reuse."""

import subprocess
import sys

import pytest
import torch

import autorl.cpu
from autorl.errors import AutoRLError
from autorl.serving import config as serving_config
from autorl.serving import embedded, lifetime, memory, vllm_entry, vllm_server
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import running_server_for
from autorl.serving.memory import kv_bytes_per_token, kv_cache_bytes
from autorl.serving.vllm_server import VLLMServer
from ruler.endpoint import ModelEndpoint
from tests.helpers.servers import SMOLLM2, write_config

# SmolLM2-135M's shape: 30 layers x 3 KV heads x 64 (576 / 9) x 2 (K, V) x 2 (bf16) = 23040 bytes a token


def command(tmp_path, **config) -> list[str]:
    if not (tmp_path / "config.json").exists():
        write_config(tmp_path, SMOLLM2)
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
    # the worker merges checkpoints in memory (autorl/serving/worker_merge.py), unless files are asked for
    extension = ["--worker-extension-cls", "autorl.serving.worker_merge.MergedLoraExtension"]
    merged = command(tmp_path, lora_serving="merged")
    assert merged[merged.index("--worker-extension-cls") :][:2] == extension
    assert "--worker-extension-cls" not in command(tmp_path, lora_serving="merged", merged_reload="files")
    assert "--worker-extension-cls" not in command(tmp_path, lora_serving="adapter")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the in-process executor is a CPU-only option")
def test_on_cpu_the_model_runs_in_the_engine_process_unless_told_otherwise(tmp_path):
    uni = ["--distributed-executor-backend", "uni"]
    default = command(tmp_path)
    assert default[default.index("--distributed-executor-backend") :][:2] == uni
    assert "--distributed-executor-backend" not in command(tmp_path, cpu_in_process=False)
    chosen = command(tmp_path, extra_args=["--distributed-executor-backend", "mp"])
    assert chosen.count("--distributed-executor-backend") == 1 and chosen[-1] == "mp"


def test_on_cpu_the_engine_is_forked_with_the_libraries_vllm_preloads_already_loaded(tmp_path, monkeypatch):
    pretend_cuda(monkeypatch, False)
    monkeypatch.setenv("LD_PRELOAD", "/opt/libmine.so")
    write_config(tmp_path, SMOLLM2)
    server = VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig())
    server.port = 8000
    assert server.command()[1:3] == ["-m", "autorl.serving.vllm_entry"]
    preload = server.environment()["LD_PRELOAD"].split(":")
    assert preload[0] == "/opt/libmine.so" and any("libgomp" in library for library in preload[1:])
    spawned = VLLMServer(tmp_path, "m", tmp_path / "log", ServerConfig(cpu_fork=False))
    spawned.port = 8000
    assert spawned.command()[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert spawned.environment()["LD_PRELOAD"] == "/opt/libmine.so"  # vLLM adds its own, for a spawned engine
    # an OpenMP library of the user's own is kept, not doubled
    assert not any("libgomp" in library for library in vllm_entry.with_preloads("/x/libiomp5.so").split(":"))
    pretend_cuda(monkeypatch, True)
    assert server.command()[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def pretend_cuda(monkeypatch, cuda: bool) -> None:
    """Every place that asks whether CUDA is there (the config's defaults, the command line) hears `cuda`."""
    for module in (serving_config, vllm_server):
        monkeypatch.setattr(module, "cuda_available", lambda: cuda)
    monkeypatch.setattr(vllm_server, "cuda_total_bytes", lambda: 80 * 2**30)  # an H100's


@pytest.mark.parametrize("cuda", [False, True])
def test_auto_serving_merges_on_cpu_and_uses_adapters_on_cuda_or_off_loopback(monkeypatch, cuda):
    pretend_cuda(monkeypatch, cuda)
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
        lifetime.started_servers.add(servers["merged"])
        assert running_server_for(tmp_path) is None  # a training step would swap its weights
        lifetime.started_servers.add(servers["adapter"])
        assert running_server_for(tmp_path) is servers["adapter"]
        embedded._shared_servers[tmp_path.resolve()] = servers["merged"]  # embedded_endpoint's own
        assert running_server_for(tmp_path) is servers["merged"]
    finally:
        embedded._shared_servers.pop(tmp_path.resolve(), None)
        for server in servers.values():
            server.stop()


def test_the_embedded_model_is_asked_where_serve_embedded_with_points_and_no_server_starts_here():
    elsewhere = ModelEndpoint(model="embedded:smollm2-135m", base_url="http://127.0.0.1:9/v1")  # a cluster's
    asked: list[int] = []
    starts = VLLMServer.starts
    embedded.serve_embedded_with(lambda: asked.append(1) or elsewhere)
    try:
        for _ in range(2):  # what RULER's embedded judge and the embedded generator resolve
            target = ModelEndpoint.parse("embedded").target()
            assert (target.api_base, target.name) == ("http://127.0.0.1:9/v1", "embedded:smollm2-135m")
    finally:
        embedded.serve_embedded_with(None)
    assert asked == [1, 1] and VLLMServer.starts == starts
    assert embedded._served_elsewhere is None


def test_merged_weights_go_to_dev_shm_only_when_it_has_room():
    assert vllm_server._memory_dir(10**15) is None  # a petabyte: the default temporary directory instead


def test_the_embedded_judge_and_generator_s_own_server_starts_eager_unless_told_otherwise(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(embedded, "resolve_base_model", lambda name: tmp_path)
    monkeypatch.setattr(embedded, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(VLLMServer, "start", lambda server: started.append(server.config))
    monkeypatch.setattr(embedded, "_shared_servers", {})
    embedded.embedded_endpoint()  # it decodes little in a run: torch.compile's start costs more than it saves
    monkeypatch.setattr(embedded, "_shared_servers", {})
    embedded.embedded_endpoint(ServerConfig(enforce_eager=False))
    assert [config.enforce_eager for config in started] == [True, False]


def test_kv_bytes_per_token_come_from_the_model_config(tiny_model, tmp_path):
    # tiny Llama: 2 layers x 2 KV heads x 8 (32 / 4 heads) x 2 (K, V) x 2 bytes ("auto": vLLM serves bf16)
    assert kv_bytes_per_token(tiny_model) == 128
    assert kv_bytes_per_token(tiny_model, "float32") == 256
    write_config(tmp_path, SMOLLM2)
    assert kv_bytes_per_token(tmp_path) == 23040
    write_config(tmp_path, {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512, "head_dim": 96})
    assert kv_bytes_per_token(tmp_path, "bfloat16") == 4 * 8 * 96 * 2 * 2  # no KV heads given: one per head


def test_kv_cache_holds_max_num_seqs_rollouts_and_one_sequence_of_max_model_len(tiny_model, tmp_path):
    # 300 tokens (under KV_TOKENS_PER_SEQUENCE) -> 3 blocks of 128 x 128 bytes = 49152 bytes a sequence in flight
    assert kv_cache_bytes(tiny_model, 4, 300, available_bytes=10**9) == 4 * 49152
    # one sequence alone: max_model_len in whole blocks plus one, 4 x 128 tokens x 128 bytes
    assert kv_cache_bytes(tiny_model, 1, 300, available_bytes=10**9) == 65536
    write_config(tmp_path, SMOLLM2)  # the defaults: 32 x 512 tokens (4 blocks) x 23040 bytes = 0.35 GiB
    assert kv_cache_bytes(tmp_path, 32, 2048, available_bytes=10**12) == 32 * 4 * 128 * 23040 == 377_487_360
    assert kv_cache_bytes(tmp_path, 2, 2048, available_bytes=10**12) == 17 * 128 * 23040  # one of 2048 + a block


def test_kv_cache_is_capped_by_the_memory_available_down_to_one_sequence(tiny_model):
    assert kv_cache_bytes(tiny_model, 4, 300, available_bytes=100_000) == 100_000
    assert kv_cache_bytes(tiny_model, 4, 300, available_bytes=65536) == 65536
    with pytest.raises(AutoRLError, match=r"at least 0\.00 GiB .*max_model_len 300.*lower max_model_len") as error:
        kv_cache_bytes(tiny_model, 4, 300, available_bytes=65535)
    assert "\n" not in str(error.value)
    with pytest.raises(AutoRLError, match=r"config\.json"):
        kv_cache_bytes(tiny_model / "missing", 4, 300, available_bytes=10**9)


def test_a_config_without_the_sizes_asks_for_kv_cache_bytes(tmp_path):
    write_config(tmp_path, {"n_layer": 12, "n_head": 12, "n_embd": 768})  # GPT-2's names
    with pytest.raises(AutoRLError, match=r"num_attention_heads.*kv_cache_bytes"):
        kv_bytes_per_token(tmp_path)


def test_on_cpu_the_kv_cache_is_sized_in_bytes_never_as_a_memory_fraction(tmp_path, monkeypatch):
    pretend_cuda(monkeypatch, False)
    monkeypatch.setattr(vllm_server, "memory_available_for_kv", lambda model_dir: 10**12)
    monkeypatch.setattr(autorl.cpu, "cpu_flags", lambda: {"avx2", "avx512_bf16"})  # native bf16: 2-byte KV
    default = command(tmp_path)
    assert default[default.index("--kv-cache-memory-bytes") :][:2] == ["--kv-cache-memory-bytes", "377487360"]
    assert default[default.index("--dtype") + 1] == "auto"
    monkeypatch.setattr(autorl.cpu, "cpu_flags", lambda: {"avx2"})  # bf16 in software: served in float32
    float32 = command(tmp_path)
    assert float32[float32.index("--dtype") + 1] == "float32"
    assert float32[float32.index("--kv-cache-memory-bytes") + 1] == str(2 * 377487360)
    monkeypatch.setattr(autorl.cpu, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert default[default.index("--max-num-seqs") :][:2] == ["--max-num-seqs", "32"]
    assert "--gpu-memory-utilization" not in default
    small = command(tmp_path, max_num_seqs=2, max_model_len=256)  # 2 x 2 blocks of 128 tokens x 23040 bytes
    assert small[small.index("--kv-cache-memory-bytes") + 1] == str(2 * 2 * 128 * 23040)
    assert small[small.index("--max-num-seqs") + 1] == "2"
    explicit = command(tmp_path, kv_cache_bytes=123456789)
    assert explicit[explicit.index("--kv-cache-memory-bytes") + 1] == "123456789"
    monkeypatch.setattr(vllm_server, "memory_available_for_kv", lambda model_dir: 10**6)
    with pytest.raises(AutoRLError, match="lower max_model_len"):
        command(tmp_path)
    with pytest.raises(AutoRLError, match="CUDA only"):
        command(tmp_path, gpu_memory_utilization=0.5)


def test_on_cuda_vllm_takes_half_the_gpu_with_the_judge_unless_told_a_share_or_bytes(tmp_path, monkeypatch):
    pretend_cuda(monkeypatch, True)
    default = command(tmp_path)
    assert "--kv-cache-memory-bytes" not in default and "--max-num-seqs" not in default
    # half the GPU for the policy and the embedded judge's server (3 GiB of 80: 0.04), the rest to the trainer
    assert default[default.index("--gpu-memory-utilization") + 1] == "0.46"
    chosen = command(tmp_path, gpu_memory_utilization=0.3, max_num_seqs=64)
    assert chosen[chosen.index("--gpu-memory-utilization") + 1] == "0.3"
    assert chosen[chosen.index("--max-num-seqs") + 1] == "64"
    explicit = command(tmp_path, kv_cache_bytes=10**9)
    assert explicit[explicit.index("--kv-cache-memory-bytes") + 1] == "1000000000"
    # vLLM checks its share is free at its start whatever sizes the KV cache: its default, 0.9, would not be
    assert explicit[explicit.index("--gpu-memory-utilization") + 1] == "0.46"


def test_meminfo_files_are_read_in_bytes(tmp_path):
    (tmp_path / "node").write_text("Node 0 MemTotal:       13068500 kB\nNode 0 MemFree:  3888924 kB\n")
    (tmp_path / "proc").write_text("MemTotal:       24684092 kB\nMemAvailable:   21736224 kB\nHugePages_Total: 0\n")
    assert memory._meminfo(str(tmp_path / "node")) == {"MemTotal": 13068500 * 1024, "MemFree": 3888924 * 1024}
    assert memory._meminfo(str(tmp_path / "proc"))["MemAvailable"] == 21736224 * 1024
    assert memory._meminfo(str(tmp_path / "proc"))["HugePages_Total"] == 0


def test_importing_the_server_module_takes_no_signal_and_a_backend_does(tmp_path):
    code = (
        "import signal, autorl, autorl.serving.vllm_server, autorl.serving.lifetime as v; "
        "before = signal.getsignal(signal.SIGTERM); "
        f"autorl.LocalBackend({str(tmp_path)!r}); "
        "print(before == signal.SIG_DFL, signal.getsignal(signal.SIGTERM) is v._on_sigterm)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"]


def test_a_run_s_policy_on_cpu_starts_eager_unless_it_plans_enough_tokens_for_the_compile_to_pay(tmp_path, monkeypatch):
    from pipelines import policy
    from pipelines.config import RunConfig

    monkeypatch.setattr(policy, "cuda_available", lambda: False)
    monkeypatch.setattr(policy, "compile_cache", lambda: tmp_path)  # compiled on this machine before
    unset = {"server": ServerConfig(enforce_eager=None)}
    readme = RunConfig(steps=2, group_size=4, **unset)  # 2 x 2 x 4 answers + 2 x 8 x 2 evaluated, of 128 tokens
    assert policy.planned_tokens(readme) == (16 + 32) * 128 < policy.COMPILE_PAYS_WARM
    assert policy.policy_server(readme).enforce_eager is True
    default = RunConfig(**unset)  # 20 steps: (320 + 32) x 128 = 45k tokens
    assert policy.COMPILE_PAYS_WARM < policy.planned_tokens(default) < policy.COMPILE_PAYS_COLD
    assert policy.policy_server(default).enforce_eager is False
    monkeypatch.setattr(policy, "compile_cache", lambda: tmp_path / "absent")  # the first compile costs minutes
    assert policy.policy_server(default).enforce_eager is True
    assert policy.policy_server(RunConfig(steps=200, **unset)).enforce_eager is False
    # what a user sets stays; so does None where the server runs elsewhere or on CUDA (vLLM's compiled default)
    assert policy.policy_server(RunConfig(steps=2, server=ServerConfig(enforce_eager=False))).enforce_eager is False
    assert policy.policy_server(RunConfig(steps=2, backend="http://127.0.0.1:1", **unset)).enforce_eager is None
    monkeypatch.setattr(policy, "cuda_available", lambda: True)
    assert policy.policy_server(readme).enforce_eager is None
