"""Plumbing shared by the Redis stores: clients, key naming, script calls.

Kept apart from the stores so that every store names keys, encodes ids and
reports Redis failures the same way.
"""

from __future__ import annotations

import asyncio
import re
import logging
import socket
from typing import Any
from typing import Iterable
from typing import Sequence
from urllib.parse import quote

try:
  import redis
except ImportError as e:  # an optional dependency: the `redis` extra
  raise ImportError(
      "aether_frame.stores needs the redis package, from the `redis` extra:"
      " pip install -e '.[redis]' in an aether-frame checkout (or: pip install 'redis>=5.0')"
  ) from e
from redis import exceptions as redis_errors
import redis.asyncio as redis_asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from .errors import CorruptDataError
from .errors import RedisStoreError
from .errors import StoreUnavailableError

logger = logging.getLogger(__name__)

RedisClient = Any  # redis.asyncio.Redis or redis.asyncio.RedisCluster

DEFAULT_PREFIX = "aether"

# Errors after which the command may or may not have run on the server.
UNAVAILABLE_ERRORS = (redis_errors.ConnectionError, redis_errors.TimeoutError)


SOCKET_TIMEOUT_S = 5.0
"""How long a URL-built client waits for a reply (``?socket_timeout=`` in the URL overrides it).

redis-py waits forever by default: a server that stops answering (a network
partition, a primary frozen by a fork) blocked every call of the agent. Long
enough for a whole large session read in one script."""
CONNECT_TIMEOUT_S = 2.0
"""How long a URL-built client waits to connect (``?socket_connect_timeout=`` overrides it)."""


def _client_from_url(url: str, cluster: bool) -> RedisClient:
  timeouts = dict(socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S)
  if cluster:
    return RedisCluster.from_url(url, **timeouts)
  # from_url() alone never retries; every store operation is idempotent
  # (appends dedupe by event id), so re-sending after a dropped reply is safe.
  return redis_asyncio.Redis.from_url(url, retry=default_retry(), **timeouts)


def redacted(url: str) -> str:
  """``url`` with its password (``//user:PASSWORD@``) as ``***``: errors and logs show URLs."""
  return re.sub(r"(//[^/:@]*:)[^/]*@", r"\1***@", url, count=1)


class Connection:
  """The client (and its scripts) a store uses on the running event loop.

  A redis.asyncio client only works on the loop that opened its connections,
  and ADK's sync `Runner.run()` starts a new loop per call. A store built from
  a URL therefore opens one client per loop; a client passed in is used as is
  (and never closed by the store).
  """

  def __init__(
      self,
      redis_client_or_url: Any,
      sources: dict[str, str],
      *,
      cluster: bool | None = None,
  ) -> None:
    self._sources = sources
    self._url: str | None = None
    self._fixed: tuple[RedisClient, Scripts] | None = None
    # id(loop) -> (loop, client, scripts); holding the loop keeps its id
    # unique. Not a WeakKeyDictionary: the client's sockets reference their
    # loop, so an entry would never drop.
    self._per_loop: dict[
        int, tuple[asyncio.AbstractEventLoop, RedisClient, Scripts]
    ] = {}
    if isinstance(redis_client_or_url, str):
      url = redis_client_or_url
      if not url.lower().startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            "Redis URL must start with redis://, rediss:// or unix://, got"
            f" {redacted(url)!r}"
        )
      self._url = url
      self.cluster = bool(cluster)
    elif isinstance(redis_client_or_url, (redis.Redis, redis.RedisCluster)):
      raise TypeError(
          "The Redis stores are async: pass a redis.asyncio.Redis or"
          " redis.asyncio.RedisCluster client (or a URL), not the sync"
          f" {type(redis_client_or_url).__name__}"
      )
    elif hasattr(redis_client_or_url, "evalsha"):
      client = redis_client_or_url
      self._fixed = (client, Scripts(client, sources))
      self.cluster = is_cluster(client)
    else:
      raise TypeError(
          "Expected a redis:// or rediss:// URL or a redis.asyncio client, got"
          f" {type(redis_client_or_url).__name__}"
      )

  def _entry(self) -> tuple[RedisClient, Scripts]:
    if self._fixed is not None:
      return self._fixed
    loop = asyncio.get_running_loop()
    entry = self._per_loop.get(id(loop))
    if entry is None:
      self._drop_closed_loops()
      client = _client_from_url(self._url or "", self.cluster)
      entry = (loop, client, Scripts(client, self._sources))
      self._per_loop[id(loop)] = entry
    return entry[1], entry[2]

  def _drop_closed_loops(self) -> None:
    """Forgets the clients of loops that have closed (one per sync
    `Runner.run()`), which nothing could use or close any more."""
    for key, (loop, client, _) in list(self._per_loop.items()):
      if loop.is_closed() and self._per_loop.pop(key, None) is not None:
        _abandon(client)

  @property
  def client(self) -> RedisClient:
    """Client for the running loop (call from inside a coroutine)."""
    return self._entry()[0]

  @property
  def scripts(self) -> "Scripts":
    return self._entry()[1]

  async def close(self) -> None:
    """Closes the URL-built client of the running loop and drops those of
    closed loops; clients of other running loops stay open."""
    if self._fixed is not None:
      return
    self._drop_closed_loops()
    try:
      loop = asyncio.get_running_loop()
    except RuntimeError:
      return
    entry = self._per_loop.pop(id(loop), None)
    if entry is not None:
      await entry[1].aclose()


def _abandon(client: RedisClient) -> None:
  """Disconnects a client whose event loop has closed.

  aclose() would await on that loop, so this does its work synchronously:
  every socket is shut down, so the server drops the connection at once, and
  detached from redis-py, which would otherwise log each one as unclosed. The
  file descriptors close when the garbage collector frees the transports
  (they reference the dead loop, so they sit in a reference cycle). This
  reaches into redis-py's pools; if those change, the collector still closes
  the sockets, only later.
  """
  try:
    conns = _connections(client)
  except AttributeError:
    logger.debug("Cannot reach the connections of %r", client, exc_info=True)
    return
  for conn in conns:
    writer = conn._writer
    conn._reader = conn._writer = None
    if writer is None:
      continue
    sock = writer.transport.get_extra_info("socket")
    try:
      if sock is not None:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass  # the server or the network closed it already


def _connections(client: RedisClient) -> list[Any]:
  if not is_cluster(client):
    pool = client.connection_pool
    return [*pool._available_connections, *pool._in_use_connections]
  client._initialize = True  # as aclose() leaves it, so it is not "unclosed"
  manager = client.nodes_manager
  # Keyed by id: ClusterNode compares by name, and the node the client was
  # built with can differ from the cached node of the same name.
  nodes = {
      id(node): node
      for node in (
          *client.startup_nodes,
          *manager.startup_nodes.values(),
          *manager.nodes_cache.values(),
      )
  }
  return [conn for node in nodes.values() for conn in node._connections]


class RedisStoreBase:
  """Client access and close() shared by the stores; subclasses set _conn."""

  _conn: Connection

  @property
  def client(self) -> RedisClient:
    """The redis.asyncio client of the running event loop."""
    return self._conn.client

  @property
  def _client(self) -> RedisClient:
    return self._conn.client

  @property
  def _scripts(self) -> "Scripts":
    return self._conn.scripts

  async def close(self) -> None:
    """Closes the client if the store created it from a URL."""
    await self._conn.close()


def default_retry() -> Retry:
  """Reconnect a few times over ~1 s before reporting Redis unavailable.

  Dropped connections only: a reply that timed out already waited
  ``SOCKET_TIMEOUT_S``, and six more waits on a stalled server would hold the
  caller for half a minute.
  """
  return Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), retries=6,
               supported_errors=(redis_errors.ConnectionError,))


def is_cluster(client: RedisClient) -> bool:
  """Cluster clients cannot run one script across slots, so stores split
  app-wide writes from per-user writes."""
  return isinstance(client, RedisCluster)


def check_prefix(prefix: str) -> str:
  """A brace in the prefix would become the hash tag and break slot
  co-location."""
  if not prefix or "{" in prefix or "}" in prefix:
    raise ValueError(f"key_prefix must be non-empty and brace-free: {prefix!r}")
  return prefix


def enc(part: str) -> str:
  """Percent-encodes an id so ':' '{' '}' in ids cannot collide or move the
  hash tag; `a:b`/`c` and `a`/`b:c` get different keys."""
  if not isinstance(part, str):
    raise TypeError(f"Ids must be str, got {type(part).__name__}: {part!r}")
  return quote(part, safe="")


def user_tag(prefix: str, app_name: str, user_id: str) -> str:
  """Key stem whose hash tag puts everything of one (app, user) in one slot."""
  return f"{prefix}:{{{enc(app_name)}:{enc(user_id)}}}"


def app_tag(prefix: str, app_name: str) -> str:
  """Key stem for app-wide keys (own slot in Cluster)."""
  return f"{prefix}:{{{enc(app_name)}}}"


def text(value: Any) -> str:
  """Decodes replies from clients with or without decode_responses."""
  if isinstance(value, bytes):
    return value.decode("utf-8")
  return value


def pairs(flat: Sequence[Any]) -> list[tuple[str, Any]]:
  """[k1, v1, k2, v2] -> [(k1, v1), ...] with decoded keys."""
  return [(text(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]


def hash_flat(mapping: dict[Any, Any]) -> list[Any]:
  """HGETALL's dict -> the flat [k1, v1, ...] form scripts return."""
  return [x for kv in mapping.items() for x in kv]


def flatten(mapping: Iterable[tuple[str, str]]) -> list[str]:
  """Builds the `n k1 v1 ... kn vn` ARGV block the scripts read."""
  items = list(mapping)
  out: list[str] = [str(len(items))]
  for k, v in items:
    out.append(k)
    out.append(v)
  return out


class Scripts:
  """Registers Lua sources on one client; redis-py reloads on NOSCRIPT
  (e.g. after a Redis restart)."""

  def __init__(self, client: RedisClient, sources: dict[str, str]) -> None:
    self._scripts = {
        name: client.register_script(src) for name, src in sources.items()
    }

  async def run(
      self,
      name: str,
      keys: Sequence[str],
      args: Sequence[Any],
      *,
      operation: str,
      hint: str = "",
  ) -> Any:
    """Runs a script and turns Redis failures into errors naming the key."""
    try:
      return await self._scripts[name](keys=list(keys), args=list(args))
    except UNAVAILABLE_ERRORS as e:
      raise StoreUnavailableError(operation, keys[0], e, hint) from e
    except redis_errors.ResponseError as e:
      raise_for_response(e, operation, keys)
      raise  # unreachable


def raise_for_response(
    e: redis_errors.ResponseError, operation: str, keys: Sequence[str]
) -> None:
  """Maps a Redis error reply to a store error naming the key."""
  msg = str(e)
  if "AFCORRUPT" in msg:
    # Scripts report `AFCORRUPT <key> <detail>` before writing anything.
    rest = msg.split("AFCORRUPT", 1)[1].strip()
    key, _, detail = rest.partition(" ")
    raise CorruptDataError(key, detail) from e
  if "WRONGTYPE" in msg:
    raise CorruptDataError(
        keys[0], f"{operation}: a key holds the wrong Redis type ({msg})"
    ) from e
  if "CROSSSLOT" in msg:
    raise RedisStoreError(
        f"{operation} on {keys[0]!r} touched keys in different Cluster slots:"
        f" {msg}",
        key=keys[0],
    ) from e
  raise RedisStoreError(
      f"{operation} on {keys[0]!r} failed: {msg}", key=keys[0]
  ) from e


async def guarded(operation: str, key: str, awaitable: Any) -> Any:
  """Awaits a plain Redis command with the same error mapping as scripts."""
  try:
    return await awaitable
  except UNAVAILABLE_ERRORS as e:
    raise StoreUnavailableError(operation, key, e) from e
  except redis_errors.ResponseError as e:
    raise_for_response(e, operation, [key])
    raise


def ttl_ms(ttl_seconds: float | None) -> str:
  """TTL as the millisecond string scripts take; "0" disables expiry."""
  if ttl_seconds is None:
    return "0"
  if ttl_seconds <= 0:
    raise ValueError(f"ttl_seconds must be positive or None, got {ttl_seconds}")
  return str(max(1, int(round(ttl_seconds * 1000))))
