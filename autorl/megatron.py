"""ART's `art.megatron` path. autorl has no Megatron trainer: each name here is one clear error saying what to use."""

from .errors import refusing

MEGATRON = (
    "autorl has no Megatron trainer (tensor, pipeline and expert parallelism); it trains a LoRA with PEFT or "
    "Unsloth: on one machine with `LocalBackend`, data-parallel over a Ray cluster with `ClusterBackend`"
)
"""What every Megatron name of ART's answers (`art.MegatronRuntimeConfig`, `art.megatron.MegatronBackend`, ...)."""
NAMES = (
    "MegatronBackend",
    "MegatronRuntimeConfig",
    "MegatronTopologyConfig",
    "get_megatron_runtime_config",
    "init_megatron_runtime_config",
)

__getattr__ = refusing("autorl.megatron", dict.fromkeys(NAMES, MEGATRON))
