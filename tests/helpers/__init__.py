"""Shared test helpers: tiny random models, the no-cache reference, the synthetic trace engine, the oracle."""
