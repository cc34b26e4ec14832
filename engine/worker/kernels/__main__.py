"""`python -m engine.worker.kernels`: build the C kernels now (install.sh does), and say where they are or why not.
`--bench [--threads N]`: then the linear kernel against torch's MKL and oneDNN products (linear_bench.py)."""

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
    if "--bench" in sys.argv[1:] and load("panel_linear") is not None:
        import torch

        from engine.worker.kernels.linear_bench import compare, format_rows

        if "--threads" in sys.argv:
            torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        print(format_rows(compare()))
