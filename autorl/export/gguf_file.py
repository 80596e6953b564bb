"""Merged weights as a GGUF file (llama.cpp's format, which Ollama and LM Studio run), written with the `gguf`
package: the base model's own GGUF gives the metadata and the tokenizer (an embedded base is one), the merged
weights the tensors, in llama.cpp's tensor names and layout; f16, or quantized per `QUANTS`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import gguf
import numpy as np
import torch

from ..errors import AutoRLError


class GgufType(NamedTuple):
    """A GGUF type `--quant` names: its tensors' type and the file type the header records."""

    tensors: gguf.GGMLQuantizationType
    file: gguf.LlamaFileType

    def bytes_per_weight(self) -> float:
        """What a weight takes on disk (blocks of weights with their scales)."""
        weights, size = gguf.GGML_QUANT_SIZES[self.tensors]
        return size / weights


QUANTS = {
    "f16": GgufType(gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": GgufType(gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q5_0": GgufType(gguf.GGMLQuantizationType.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0),
    "q4_0": GgufType(gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}
"""The types `--quant` names (those the `gguf` package quantizes); norms stay float32 in every one, as llama.cpp
keeps them."""
EMBEDDING = "token_embd.weight"
"""Kept at q8_0 below 8 bits (the embedding is the output layer too where they are tied), as the embedded
model's own Q4_1 file keeps it."""
_REWRITTEN = {gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE, gguf.Keys.Tokenizer.CHAT_TEMPLATE}
"""Metadata the export writes itself rather than copying from the base GGUF."""
ARCHITECTURES = {"llama": gguf.MODEL_ARCH.LLAMA}
"""The architectures whose tensors this writer lays out (llama.cpp's `permute` of the query and key weights)."""


def write_gguf(
    base_gguf: Path, weights: dict[str, torch.Tensor], chat_template: str, out_file: Path, quant: str = "f16"
) -> None:
    """Write `weights` (a Hugging Face Llama's tensors by name) as `out_file`, with every metadata field of
    `base_gguf` (its tokenizer among them) but the file type and the chat template (`chat_template`: the one
    the checkpoint was trained with)."""
    if quant not in QUANTS:
        raise AutoRLError(f"--quant {quant!r} is not a GGUF type this export writes; use one of {', '.join(QUANTS)}")
    reader = gguf.GGUFReader(base_gguf)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    if arch not in ARCHITECTURES:
        raise AutoRLError(f"GGUF export writes {', '.join(ARCHITECTURES)} models; {base_gguf.name} is {arch}")
    writer = gguf.GGUFWriter(out_file, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in _REWRITTEN:
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    writer.add_file_type(QUANTS[quant].file)
    writer.add_chat_template(chat_template)
    for name, array, qtype in _tensors(weights, reader, arch, QUANTS[quant].tensors):
        writer.add_tensor(name, array, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _field(reader: gguf.GGUFReader, arch: str, key: str) -> int:
    return int(reader.fields[key.format(arch=arch)].contents())


def _tensors(
    weights: dict[str, torch.Tensor], reader: gguf.GGUFReader, arch: str, qtype: gguf.GGMLQuantizationType
) -> Iterator[tuple[str, np.ndarray, gguf.GGMLQuantizationType]]:
    """Each tensor's GGUF name, data and type, in the base GGUF's tensor order."""
    blocks = _field(reader, arch, gguf.Keys.LLM.BLOCK_COUNT)
    heads = _field(reader, arch, gguf.Keys.Attention.HEAD_COUNT)
    kv_heads = _field(reader, arch, gguf.Keys.Attention.HEAD_COUNT_KV)
    names = gguf.get_tensor_name_map(ARCHITECTURES[arch], blocks)
    by_gguf_name = {}
    for hf_name, tensor in weights.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise AutoRLError(f"GGUF export: no llama.cpp name for tensor {hf_name}")
        data = tensor.float().numpy()
        if hf_name.endswith("q_proj.weight"):
            data = _permute(data, heads)
        elif hf_name.endswith("k_proj.weight"):
            data = _permute(data, kv_heads)
        by_gguf_name[name] = data
    expected = [t.name for t in reader.tensors]
    if sorted(expected) != sorted(by_gguf_name):
        missing = sorted(set(expected) ^ set(by_gguf_name))[:3]
        raise AutoRLError(f"GGUF export: the merged weights and {arch} base GGUF differ in tensors ({missing} ...)")
    for name in expected:
        data = by_gguf_name[name]
        if data.ndim < 2:  # norms
            yield name, data, gguf.GGMLQuantizationType.F32
            continue
        kind = qtype
        if name == EMBEDDING and qtype not in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0):
            kind = gguf.GGMLQuantizationType.Q8_0
        yield name, gguf.quants.quantize(data, kind), kind


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """A query or key projection of `heads` heads in llama.cpp's rotary layout (its converter's `permute`: each
    head's two rotary halves interleaved), which Hugging Face's Llama keeps apart."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )
