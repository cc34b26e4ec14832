"""Exports of a trace to other tools: Perfetto (`kvtui export --perfetto`)."""
