"""The tools that write docs/ from the code: the screenshots (screenshots.py, the real app on the fixture traces)
and the trace-format page (trace_format.py, from the schema table). They run from a checkout and sit above the
CLI in the package layers (docs/architecture.md): no other package imports them."""
