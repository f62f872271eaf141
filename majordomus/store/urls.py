"""What a Redis URL names: one Redis (`redis://`, `rediss://`, `unix://`), a Redis Cluster
(`redis+cluster://host:port[,host:port...]`) or a master Redis Sentinel watches
(`redis+sentinel://host:port[,host:port...]/service[/db]`), read into the parts the
clients are made of, and the error a URL that is none of them gets.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from redis.asyncio.connection import parse_url

from majordomus.config import shown_url
from majordomus.errors import MajordomusError, invalid_input

DEFAULT_URL = "redis://127.0.0.1:6379/0"

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The URL schemes of a Redis Cluster, each with the scheme of one of its nodes."""


def is_cluster_url(url: str | None) -> bool:
    """Whether `url` names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`)."""
    return (url or "").partition("://")[0].lower() in CLUSTER_SCHEMES


SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
"""The URL schemes of a master that Sentinel names, each with the scheme of the master's
connections."""

SENTINEL_PORT = 26379
"""A sentinel's port where the URL gives none (Sentinel's own default)."""

SENTINEL_CREDENTIALS = ("sentinel_username", "sentinel_password")
"""The query parameters of a Sentinel URL that are the sentinels' own credentials (the URL's
user and password are the master's)."""


def is_sentinel_url(url: str | None) -> bool:
    """Whether `url` names a master through Sentinel (`redis+sentinel://`, `rediss+sentinel://`)."""
    return (url or "").partition("://")[0].lower() in SENTINEL_SCHEMES


def hosts_of(url: str, default_port: int) -> tuple[str, str, list[tuple[str, int]], str, str]:
    """What a URL naming several hosts holds: its scheme, its credentials (`user:password@`
    as written, or nothing), its hosts with their ports (`default_port` where none is
    given), its first host as written, and what follows the hosts (path and query). Raises
    `ValueError` for a host without a name or with a bad port."""
    scheme, _, rest = url.partition("://")
    ends = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    authority, tail = rest[: min(ends, default=len(rest))], rest[min(ends, default=len(rest)) :]
    user, at, hosts = authority.rpartition("@")
    found = []
    for host in hosts.split(","):
        parts = urlsplit(f"//{host}")
        if not parts.hostname:
            raise ValueError(f"no host in {host!r}")
        found.append((parts.hostname, parts.port or default_port))  # `.port` raises on a bad port
    return scheme, user + at, found, hosts.split(",", 1)[0], tail


def cluster_seeds(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The seeds of a cluster URL, and the options its nodes share (credentials, TLS, the
    query's), as redis-py reads them from the same URL with its first seed alone. Raises
    `ValueError` (or `KeyError`: no cluster scheme) for a URL that names no cluster."""
    scheme, credentials, seeds, first, tail = hosts_of(url, 6379)
    options: dict[str, Any] = dict(
        parse_url(f"{CLUSTER_SCHEMES[scheme.lower()]}://{credentials}{first}{tail}")
    )
    if options.pop("db", 0):
        raise ValueError("a cluster has database 0 only")
    options.pop("host", None)
    options.pop("port", None)
    return seeds, options


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any], dict[str, Any]]:
    """The sentinels of a Sentinel URL, its service name, the master's options
    (credentials, database, TLS, the query's), as redis-py reads them from a URL naming
    the master itself, and the sentinels' own credentials. Raises `ValueError` (or
    `KeyError`: no Sentinel scheme) for a URL that names no master through Sentinel."""
    scheme, credentials, sentinels, first, tail = hosts_of(url, SENTINEL_PORT)
    path, _, query = tail.partition("?")
    service, _, db = path.removeprefix("/").partition("/")
    service, db = unquote(service), db.rstrip("/")
    if not service:
        raise ValueError("no service name: the path names it, as in host:26379/mymaster")
    if db and not db.isdigit():
        raise ValueError(f"{db!r} is no database number")
    pairs = parse_qsl(query, keep_blank_values=True)
    theirs = {key.removeprefix("sentinel_"): v for key, v in pairs if key in SENTINEL_CREDENTIALS}
    rest = urlencode([(key, v) for key, v in pairs if key not in SENTINEL_CREDENTIALS])
    master = f"{SENTINEL_SCHEMES[scheme.lower()]}://{credentials}{first}/{db}"
    options: dict[str, Any] = dict(parse_url(master + (f"?{rest}" if rest else "")))
    options.pop("host", None)
    options.pop("port", None)
    return sentinels, service, options, theirs


def shown_redis_url(url: str) -> str:
    """`shown_url`, with a Sentinel URL's `sentinel_password` (in its query) hidden too."""
    if is_sentinel_url(url):
        url = re.sub(r"(?<=[?&]sentinel_password=)[^&#]*", "***", url)
    return shown_url(url)


def not_a_redis_url(url: str, exc: Exception) -> MajordomusError:
    return invalid_input(
        f"MAJORDOMUS_REDIS_URL {shown_redis_url(url)!r} is not a Redis URL ({exc})",
        "use redis://host:port/db, rediss://… for TLS, unix:///path/to/socket, "
        "redis+cluster://host:port[,host:port…] for a Redis Cluster, or "
        "redis+sentinel://host:port[,host:port…]/service[/db] for a master Sentinel watches",
    )
