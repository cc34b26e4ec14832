"""`python -m engine.worker.kernels`: build the C kernels now (install.sh does), and say where they are or why not.
`--bench [--threads N]`: then the linear kernel against torch's MKL and oneDNN products (linear_bench.py);
`--bench-decode [--threads N]`: the decode attention over float32, int8 and fp8 K/V (decode_bench.py)."""

from __future__ import annotations

import sys

from engine.worker.kernels.build import load, why_not

NAMES = ("decode_ops", "kv_quantize", "paged_decode", "panel_linear")

if __name__ == "__main__":
    for name in NAMES:
        library = load(name)
        if library is None:
            print(f"kernel {name}: not built ({why_not[name]}); kvtui uses its torch path instead")
        else:
            print(f"kernel {name}: {library._name}")
    if "--bench-decode" in sys.argv[1:] and load("paged_decode") is not None:
        import torch

        from engine.worker.kernels.decode_bench import compare as compare_decode
        from engine.worker.kernels.decode_bench import format_rows as decode_rows

        if "--threads" in sys.argv:
            torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        print(decode_rows(compare_decode()))
    if "--bench" in sys.argv[1:] and load("panel_linear") is not None:
        import torch

        from engine.worker.kernels.linear_bench import compare, format_rows

        if "--threads" in sys.argv:
            torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        print(format_rows(compare()))
