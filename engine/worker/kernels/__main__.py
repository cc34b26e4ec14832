"""`python -m engine.worker.kernels`: build the C kernels now (install.sh does), and say where they are or why not."""

from __future__ import annotations

from engine.worker.kernels.build import load, why_not

NAMES = ("paged_decode", "panel_linear")

if __name__ == "__main__":
    for name in NAMES:
        library = load(name)
        if library is None:
            print(f"kernel {name}: not built ({why_not[name]}); kvtui uses its torch path instead")
        else:
            print(f"kernel {name}: {library._name}")
