"""Where events come from besides our own engine: `kvtui attach` decodes vLLM / SGLang KV-event publishers
(ZeroMQ + msgpack) into attach events (wire.py, attach.py; the events as structs in
engine/trace/attach_structs.py), in a collector process of its own when the UI is open (collector.py). Torch-free."""
