"""`python -m kvtui`: the same CLI as the `kvtui` script (used by `kvtui serve` to start a UI per browser tab)."""

from kvtui.cli import main

main()
