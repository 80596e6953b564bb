"""A tiny random Llama and a ChatML tokenizer, built in-process (no download) for unit tests."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from autorl.training.sequences import TOKEN_ID_PREFIX

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "You are a helpful assistant. Answer politely and briefly.",
    "Reply to a customer asking for a refund, politely, in two sentences.",
    "system user assistant tool the a an of to in is it yes no please thanks",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,!?;:'\"()-\n",
]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        chat_template=CHATML,
    )


def tiny_model_dir(path: Path, seed: int = 0) -> Path:
    """Save a random 2-layer Llama and the tokenizer to `path` as a Hugging Face directory."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,  # sharper random logits: a policy change shows in samples quickly
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def choice(content: str, token_ids: list[int] | None = None, logprobs: list[float] | None = None):
    """An OpenAI `Choice` as our vLLM server returns it (sampled tokens as `token_id:N`)."""
    from openai.types.chat.chat_completion import Choice

    payload = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    if token_ids is not None:
        logprobs = logprobs if logprobs is not None else [-1.0] * len(token_ids)
        payload["logprobs"] = {
            "content": [
                {"token": f"{TOKEN_ID_PREFIX}{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(token_ids, logprobs, strict=True)
            ]
        }
    return Choice.model_validate(payload)
