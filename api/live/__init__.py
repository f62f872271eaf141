"""The live channel (`GET /events`, SSE) and the one feed reader behind it.

- `api.live.feed`: `FeedHub`, the one blocking read of the global feed in an API process,
  fanned out to bounded listeners (live channels and `executions.wait` long polls);
- `api.live.scopes`: what a channel on one execution and one on every execution each
  send, and how each catches up from Redis when its listener fell behind;
- `api.live.channel`: `LiveChannel`, the ASGI endpoint: admission, the request, the loop;
- `api.live.sse`: the server-sent events framing over raw ASGI;
- `api.live.apart`: the API's side of `serve`'s delivery process: an admitted channel's
  connection handed to it, the process started again when it dies;
- `api.live.delivery`: that process: the same `LiveChannel` on a feed reader of its own,
  over the connections the API hands it.

Everything here reads Redis through the engine; nothing checks origins or tokens
(`api.access` does, before a request gets here).
"""

from majordomus.api.live.channel import ChannelRequest, LiveChannel, parse_channel_request
from majordomus.api.live.feed import LISTENER_BUFFER, FeedEntry, FeedHub, Listener
from majordomus.api.live.sse import accepts_event_stream, sse_event

__all__ = [
    "LISTENER_BUFFER",
    "ChannelRequest",
    "FeedEntry",
    "FeedHub",
    "Listener",
    "LiveChannel",
    "accepts_event_stream",
    "parse_channel_request",
    "sse_event",
]
