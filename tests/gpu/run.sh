#!/usr/bin/env bash
# The GPU check, for a lent H200 (bare and offline: torch 2.11, transformers 5.17, no gguf). One script:
#   1. installs the carried wheels (.whl/, made here by tests/gpu/fetch_wheels.sh) over the image's packages;
#   2. runs the CUDA tests (tests/engine/worker/test_cuda.py: exactness of the prefix, edit, ring and sinks paths;
#      tests/engine/worker/test_scoring.py's CUDA cases: prompt log-probabilities on every cache path);
#   3. runs `kvtui bench decode` on random:llama:1b in bf16 at batch 1, 8 and 64: decode tok/s and the share
#      of the HBM bandwidth (4.8 TB/s nominal, about 4.3 TB/s measured copy);
#   4. `kvtui bench` (engine vs transformers' generate) at 8 concurrent on the same model.
# Logs go to $OUT (the device tool brings them back) or ./gpu-out. About 5 minutes on an H200.
# Call:   run(command="bash tests/gpu/run.sh", carry=[".whl"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { echo "== $* ($(date +%H:%M:%S))" | tee -a "$OUT/summary.txt"; }

log "install carried wheels"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl 2>&1 | tail -5
    export PYTHONPATH="/tmp/site:$PYTHONPATH"  # ahead of the image's site-packages
else
    echo "no .whl/ folder: run tests/gpu/fetch_wheels.sh here and carry .whl" | tee -a "$OUT/summary.txt"
fi
python3 - <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$OUT/summary.txt"

log "CUDA tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider -x tests/engine/worker/test_cuda.py \
    tests/engine/worker/test_scoring.py -k "cuda or test_cuda" 2>&1 | tee "$OUT/cuda_tests.log" | tail -15
echo "cuda tests exit ${PIPESTATUS[0]}" | tee -a "$OUT/summary.txt"
tail -3 "$OUT/cuda_tests.log" >> "$OUT/summary.txt"

log "decode throughput, random:llama:1b bf16, batch 1 / 8 / 64"
timeout 200 python3 -c "import sys; from kvtui.cli import main; sys.argv[0] = 'kvtui'; main()" bench decode -m random:llama:1b --dtype bfloat16 --device cuda \
    --batches 1,8,64 --prompt-tokens 512 --steps 64 --peak-tbs 4.8 --copy-tbs 4.3 2>&1 \
    | tee "$OUT/decode.log" | tail -12
tail -8 "$OUT/decode.log" >> "$OUT/summary.txt"

log "engine vs transformers generate, random:llama:1b bf16, 8 concurrent"
timeout 120 python3 -c "import sys; from kvtui.cli import main; sys.argv[0] = 'kvtui'; main()" bench -m random:llama:1b --dtype bfloat16 --device cuda \
    --prompt-tokens 512 --max-tokens 64 --concurrent 8 2>&1 | tee "$OUT/vs_generate.log" | tail -10
tail -8 "$OUT/vs_generate.log" >> "$OUT/summary.txt"
log "done"
