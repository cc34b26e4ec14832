"""Models: loading (embedded, dir, gguf, hub), the one ModelShape, packaged wheels, random shapes, text."""
