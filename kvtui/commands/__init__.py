"""CLI subcommands, one module per family; kvtui/cli.py gathers them."""
