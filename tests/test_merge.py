"""Merging a PEFT LoRA into the base weights (for `ServerConfig(lora_serving="merged")`), written to a file or
handed to vLLM's in-place reload by the worker extension (`autorl/serving/worker_merge.py`)."""

import json
from types import SimpleNamespace

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from autorl.errors import AutoRLError
from autorl.serving.merge import MERGED_FILE, merged_state_dict, write_merged
from autorl.serving.worker_merge import MergedLoraExtension
from tests.helpers.lora import random_lora


@pytest.mark.parametrize(
    "lora_kwargs",
    [{"r": 8, "lora_alpha": 16}, {"r": 4, "lora_alpha": 8, "use_rslora": True, "rank_pattern": {"q_proj": 2}}],
)
def test_merged_weights_equal_peft_merge_and_unload(tiny_model, tmp_path, lora_kwargs):
    adapter = random_lora(tiny_model, tmp_path / "lora", **lora_kwargs)
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter).merge_and_unload()
    expected = expected.state_dict()
    merged = merged_state_dict(tiny_model, adapter)
    base = load_file(tiny_model / "model.safetensors")
    assert merged.keys() == base.keys()
    changed = 0
    for key, tensor in merged.items():
        torch.testing.assert_close(tensor, expected[key], rtol=1e-5, atol=1e-6)
        changed += not torch.equal(tensor, base[key])
    assert changed == 2 * 7  # 2 layers x 7 projections


def test_write_merged_writes_one_safetensors_file_in_the_requested_dtype(tiny_model, tmp_path):
    adapter = random_lora(tiny_model, tmp_path / "lora", r=8, lora_alpha=16)
    out = write_merged(tiny_model, adapter, tmp_path / "merged", dtype=torch.bfloat16)
    assert [p.name for p in out.iterdir()] == [MERGED_FILE]
    tensors = load_file(out / MERGED_FILE)
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    write_merged(tiny_model, adapter, out)  # replaced in place
    assert [p.name for p in out.iterdir()] == [MERGED_FILE]


def test_an_adapter_that_is_not_plain_lora_is_refused(tiny_model, tmp_path):
    adapter = random_lora(tiny_model, tmp_path / "lora", r=8, lora_alpha=16)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AutoRLError, match="only plain LoRA"):
        merged_state_dict(tiny_model, adapter)


class Worker(MergedLoraExtension):
    """The vLLM worker the extension is mixed into, down to what it uses: its config's dtype and an in-place
    reload that here keeps what it was given."""

    def __init__(self):
        self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.bfloat16))
        self.reloads: list[dict[str, torch.Tensor]] = []

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        assert is_checkpoint_format  # checkpoint names: vLLM's loader packs q/k/v and gate/up itself
        self.reloads.append(dict(weights_iterator))


def test_the_worker_extension_reloads_the_file_path_s_weights_from_memory(tiny_model, tmp_path):
    adapter = random_lora(tiny_model, tmp_path / "lora", r=8, lora_alpha=16)
    written = load_file(write_merged(tiny_model, adapter, tmp_path / "merged", dtype=torch.bfloat16) / MERGED_FILE)
    worker = Worker()
    worker.autorl_load_merged(str(tiny_model), str(adapter))
    worker.autorl_load_merged(str(tiny_model), None)
    merged, base = worker.reloads
    assert merged.keys() == written.keys() == base.keys()
    assert all(torch.equal(merged[k], written[k]) for k in written)  # the file path's weights, bit for bit
    stored = load_file(tiny_model / "model.safetensors")
    assert all(torch.equal(base[k], stored[k].to(torch.bfloat16)) for k in stored)
    merger = worker._autorl_merger
    worker.autorl_load_merged(str(tiny_model), str(adapter))
    assert worker._autorl_merger is merger  # the base weights are read once
