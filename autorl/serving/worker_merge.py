"""Merged serving's in-memory weight update: a vLLM worker extension (`--worker-extension-cls`) whose method
merges a LoRA checkpoint into the base weights inside the worker and reloads them in place from memory.

The file path (`LoraMerger.write`, then vLLM's `reload_weights(weights_path=...)`) writes the whole merged model
(269 MB for the embedded model) and vLLM reads it back, where the checkpoint is the adapter (9.8 MB). Here the
worker keeps the base weights (a `LoraMerger`), reads only the adapter, computes W + scale * B @ A as the file
path does (float32, rounded once to the served dtype), and hands the tensors by their checkpoint names to
vLLM's in-place reload, whose model loader packs q/k/v and gate/up into their fused layers and repacks the CPU
kernels. The weights served are the file path's, bit for bit.

autorl's client reaches the method only through vLLM's `/collective_rpc` development route, which merged
serving enables on loopback behind the server's key (`VLLMServer`); the proxies forward inference routes only.
vLLM adds this class's methods to its worker class, so every name here starts with `autorl_`.
"""

from __future__ import annotations

from pathlib import Path

METHOD = "autorl_load_merged"
"""The worker method `VLLMServer.load_merged` calls through `/collective_rpc`."""


class MergedLoraExtension:
    """Mixed into vLLM's worker: `autorl_load_merged`. Uses the worker's `reload_weights` and `vllm_config`."""

    def autorl_load_merged(self, base_dir: str, adapter_dir: str | None) -> None:
        """Serve the base weights of `base_dir` with the PEFT LoRA at `adapter_dir` merged in (None: the plain
        base weights). The base weights are read once, on the first call, in the dtype the model runs in."""
        from .merge import LoraMerger  # torch + safetensors, in the worker's process

        merger = getattr(self, "_autorl_merger", None)
        if merger is None or merger.base_dir != Path(base_dir):
            merger = LoraMerger(Path(base_dir), self.vllm_config.model_config.dtype)  # type: ignore[attr-defined]
            self._autorl_merger = merger
        weights = merger.base_weights() if adapter_dir is None else merger.merged(Path(adapter_dir))
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)  # type: ignore[attr-defined]
