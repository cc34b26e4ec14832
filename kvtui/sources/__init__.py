"""Where events come from besides our own engine: `kvtui attach` decodes vLLM / SGLang KV-event publishers
(ZeroMQ + msgpack) into normalised attach events. Torch-free."""
