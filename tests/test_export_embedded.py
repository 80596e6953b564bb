"""`autorl export` of a checkpoint of the embedded model, checked against real readers: the merged model's greedy
answers under transformers equal the checkpoint's as the run's own vLLM server serves it; the GGUF files, read
back by transformers' GGUF loader (the `gguf` package's reader under it, an implementation apart from the
writer) and run by llama.cpp (llama-cpp-python, with the GGUF's own tokenizer and chat template), answer as the
merged model (f16) or nearly (q8_0: the first token of >= 90% of the inputs); `autorl chat` streams the
checkpoint's answer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gguf
import pytest
import torch
from llama_cpp import Llama
from transformers import AutoModelForCausalLM, AutoTokenizer

from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from pipelines.chat import QUIT, RESET
from pipelines.export import export
from pipelines.run_view import RunView
from tests.helpers.benchmark_runs import PROMPT, VAL
from tests.helpers.limits import scaled
from tests.helpers.lora import lora_run

pytestmark = pytest.mark.slow
MORE = ["Name a colour.", "What is 10 - 3?", "Say hello.", "What is the capital of Italy?", "Count to three.",
        "Is water wet?", "What is 3 x 3?"]  # fmt: skip
"""Inputs besides the run's validation ones for the quantized type's first-token agreement."""
TOKENS = 16


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A finished run of the embedded model whose checkpoints are random LoRAs small enough to keep it speaking,
    served in float32 as transformers runs the export: greedy answers compare at one precision (a bf16 server,
    auto's choice on a CPU with native bf16, picks another token at a near tie)."""
    home = tmp_path_factory.mktemp("home")
    base = resolve_base_model(DEFAULT_BASE_MODEL)
    lora_run(home, DEFAULT_BASE_MODEL, base, scale=0.2, server=ServerConfig(dtype="float32"))
    return home


def prompt_ids(tokenizer, text: str) -> torch.Tensor:
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)[
        "input_ids"
    ]


def greedy(model, tokenizer, text: str, tokens: int = TOKENS) -> str:
    ids = prompt_ids(tokenizer, text)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def first_token(model, tokenizer, text: str) -> int:
    with torch.no_grad():
        return int(model(prompt_ids(tokenizer, text)).logits[0, -1].argmax())


async def served_answers(home: Path, step: int) -> list[str]:
    """The checkpoint's greedy answers from the run's own policy server (vLLM), as `autorl benchmark` asks it."""
    policy = RunView(home, "r", Counter()).policy
    try:
        name = await policy.serve_step(step)
        client = policy.model.openai_client()
        answers = []
        for text in VAL:
            response = await client.chat.completions.create(
                model=name,
                messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": text}],
                temperature=0,
                max_tokens=TOKENS,
            )
            answers.append(response.choices[0].message.content or "")
        return answers
    finally:
        await policy.aclose()


@pytest.mark.timeout(900)  # 408 s with the machine's load average at 7 on 2 cores, most of it the server's start
def test_the_merged_export_answers_as_vllm_serves_the_checkpoint(home, tmp_path):
    out = export(home, "r@2", "hf", tmp_path / "agent").out
    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    exported = [greedy(model, tokenizer, text) for text in VAL]
    base = AutoModelForCausalLM.from_pretrained(resolve_base_model(DEFAULT_BASE_MODEL))
    ids = prompt_ids(tokenizer, VAL[0])
    with torch.no_grad():  # the LoRA is in the export
        assert (model(ids).logits - base(ids).logits).abs().max() > 0.1
    assert asyncio.run(served_answers(home, 2)) == exported


@pytest.mark.timeout(1500)  # 545 s and 973 s on 2 cores shared with other test runs (load average 7 and more)
def test_the_gguf_files_answer_as_the_merged_model_in_transformers_and_llama_cpp(home, tmp_path):
    merged_dir = export(home, "r@1", "hf", tmp_path / "hf").out
    done = export(home, "r@1", "gguf", tmp_path / "gguf", ["f16", "q8_0"])
    assert {"model-f16.gguf", "model-q8_0.gguf", "Modelfile", "README.md"} <= set(done.files)
    reader = gguf.GGUFReader(done.out / "model-q8_0.gguf")
    template = (merged_dir / "chat_template.jinja").read_text()
    assert reader.fields[gguf.Keys.Tokenizer.CHAT_TEMPLATE].contents() == template  # autorl's, with tools
    assert len(reader.fields[gguf.Keys.Tokenizer.LIST].contents()) == 49152
    assert "ollama create r -f Modelfile" in (done.out / "README.md").read_text()
    assert (done.out / "Modelfile").read_text().startswith("FROM ./model-f16.gguf\n")

    merged, tokenizer = AutoModelForCausalLM.from_pretrained(merged_dir), AutoTokenizer.from_pretrained(merged_dir)
    f16 = AutoModelForCausalLM.from_pretrained(done.out, gguf_file="model-f16.gguf", dtype=torch.float32)
    assert [greedy(f16, tokenizer, t) for t in VAL] == [greedy(merged, tokenizer, t) for t in VAL]
    del f16
    q8 = AutoModelForCausalLM.from_pretrained(done.out, gguf_file="model-q8_0.gguf", dtype=torch.float32)
    texts = [*VAL, *MORE]
    agree = sum(first_token(merged, tokenizer, text) == first_token(q8, tokenizer, text) for text in texts)
    assert agree >= 0.9 * len(texts), f"{agree} of {len(texts)} first tokens agree"
    del q8

    # llama.cpp, as a user runs the file: its own tokenizer and the chat template the GGUF carries
    f16 = Llama(str(done.out / "model-f16.gguf"), n_ctx=512, n_threads=2, verbose=False)
    assert [llama_cpp_answer(f16, text) for text in VAL] == [greedy(merged, tokenizer, text) for text in VAL]
    q8 = Llama(str(done.out / "model-q8_0.gguf"), n_ctx=512, n_threads=2, verbose=False)
    agree = sum(llama_cpp_answer(q8, text, 1) == greedy(merged, tokenizer, text, 1) for text in texts)
    assert agree >= 0.9 * len(texts), f"llama.cpp: {agree} of {len(texts)} first tokens agree"


def llama_cpp_answer(model: Llama, text: str, tokens: int = TOKENS) -> str:
    """`model`'s greedy answer through llama.cpp's chat completion (the GGUF's template and tokenizer)."""
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": text}]
    answer = model.create_chat_completion(messages, temperature=0, max_tokens=tokens)
    return answer["choices"][0]["message"]["content"]


@pytest.mark.timeout(900)  # a vLLM server's start, as in the test above
def test_chat_streams_the_checkpoints_answer_and_stops_its_server(home, tmp_path):
    out = export(home, "r@2", "hf", tmp_path / "agent").out
    expected = greedy(AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out), VAL[0])
    chat = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "chat", "r@2", "--home", str(home), "--temperature", "0",
         "--max-tokens", str(TOKENS)],
        input=f"{VAL[0]}\n{RESET}\n{VAL[0]}\n{QUIT}\nnever sent\n", capture_output=True, text=True, timeout=scaled(800),
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr[-3000:]
    assert chat.stdout == f"{expected}\n(conversation reset)\n{expected}\n"  # the same answer after /reset
    assert "chatting with r@0002; /reset starts over" in chat.stderr
