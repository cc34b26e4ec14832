#!/usr/bin/env bash
# Download, HERE (where PyPI is reachable), the wheels the bare, offline GPU machine needs beyond its image
# (torch 2.11 and transformers 5.17 there): transformers 5.23.0 and the packages whose versions it needs
# above what the image may hold. They land in .whl/ (git-ignored), which travels with the device call:
#   tests/gpu/fetch_wheels.sh            then   run(command="bash tests/gpu/run.sh", carry=[".whl"])
# huggingface-hub stays on 1.x (2.x needs httpx2 and pydantic, which the image lacks). About 23 MB, under the 64 MiB a call may carry. PYVER: the GPU image's Python (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
PYVER="${PYVER:-3.12}"
rm -rf .whl && mkdir -p .whl
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl \
    transformers==5.23.0 huggingface-hub==1.33.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19 \
    hf-xet==1.8.0 click==8.5.1
ls -la .whl
du -sh .whl
