"""`--publish` on live and record: our engine's prefix cache as vLLM KV events (engine/publish.py), so
`kvtui attach` or any router that consumes vLLM's events can watch it."""

from __future__ import annotations

import click

from kvtui.app.feed import EventFeed
from kvtui.app.feed_messages import FeedHeader

publish_option = click.option(
    "--publish",
    default=None,
    metavar="tcp://HOST:PORT[,replay=...][,topic=...]",
    help="Also publish the prefix cache as vLLM KV events on ZeroMQ (binds HOST:PORT; replay= adds a replay "
    "endpoint). Watch it with: kvtui attach tcp://HOST:PORT",
)


def open_publisher(text: str):
    """A started KvEventPublisher for `--publish TEXT`, or a one-line error."""
    from engine.publish import KvEventPublisher, parse_publish

    try:
        options = parse_publish(text)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        return KvEventPublisher(**options)
    except ImportError:
        raise click.ClickException("--publish needs pyzmq and msgspec: pip install pyzmq msgspec") from None
    # a bad option, an address in use: one line
    except Exception as exc:
        raise click.ClickException(f"--publish {text!r}: {exc}") from None


class PublishingFeed(EventFeed):
    """The live feed that also hands the trace header and every engine event to the publisher (on the engine's
    thread)."""

    def __init__(self, publisher):
        super().__init__()
        self.publisher = publisher

    def put(self, item) -> None:
        # the trace header names the KV-cache groups that block events carry
        if isinstance(item, FeedHeader):
            self.publisher(item.header)
        super().put(item)

    def put_event(self, event: dict) -> None:
        self.publisher(event)
        super().put_event(event)
