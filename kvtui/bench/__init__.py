"""Benchmarks, run by hand through `kvtui bench` (not timed tests).

    engine_vs_generate   our engine against transformers' generate, same model, same run   kvtui bench
    cache                warm vs cold TTFT with a shared prefix; re-prefill after an edit  kvtui bench --cache
    ui                   replay ingest, trace parsing, seek and frame times on a big trace kvtui bench ui
    frames               each view's full-screen render, and a live-mode frame             kvtui bench frames
    live                 frame times of the live app while the real engine decodes         kvtui bench live
    attach               ZeroMQ ingest of vLLM/SGLang KV events with the fleet UI open      kvtui bench attach

Nothing here is imported until a bench command runs: the engine-side modules import torch at the top.
"""
