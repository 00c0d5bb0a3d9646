"""ADK's own context caching (``App(context_cache_config=...)``) with the plugin in front.

ADK's ``ContextCacheRequestProcessor`` runs before the plugin; it puts the
app's cache config, the previous prompt's size and the latest cache record on
the request. The model then caches a prefix: Gemini by fingerprinting the
system instruction, tools, tool config and every content before the trailing
run of user contents (``GeminiContextCacheManager``), Claude and LiteLLM by
marking the request's last block. ``GeminiCachingLlm`` below runs ADK's own
Gemini manager on each request it receives, as ``google_llm`` does; the
fingerprints are ADK's. Only Gemini's ``cachedContents`` service is stood in
for (``_CacheService``), since there is no network here.
"""

from __future__ import annotations

import datetime
import json
import types as pytypes
import warnings
from typing import Any, Optional

import pytest
from google import genai
from google.adk.agents import LlmAgent
from google.adk.agents.context_cache_config import ContextCacheConfig
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.models import _prompt_cache
from google.adk.models.gemini_context_cache_manager import GeminiContextCacheManager
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from pydantic import Field, PrivateAttr

from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, _foreign_count
from aether_frame.tokenizers import get_counter

from tests.adk_support import USER, Recorder, research_reply

pytestmark = pytest.mark.asyncio

COUNTER = get_counter()
PACK_HEAD = "CONTEXT PACK v1"
NO_CACHE_CREATION = ContextCacheConfig(min_tokens=10**9)  # fingerprints only: the service is never called
KEEP_ONE_CACHE = ContextCacheConfig(min_tokens=0, cache_intervals=100, ttl_seconds=3600)


class _CacheService:
  """Stands in for Gemini's ``cachedContents`` API: what was cached, what was deleted."""

  def __init__(self):
    self.live: dict[str, Any] = {}
    self.created: list[Any] = []
    self.deleted = 0

  async def create(self, *, model, config):
    name = f"cachedContents/{len(self.created) + 1}"
    self.created.append(config)
    self.live[name] = config
    expire = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return types.CachedContent(name=name, expire_time=expire)

  async def delete(self, *, name):
    self.deleted += 1
    self.live.pop(name, None)


def _client(service: Optional[_CacheService] = None):
  """A real GenAI client (no call at construction); with ``service``, its caches API is the stand-in."""
  real = genai.Client(api_key="offline")
  if service is None:
    return real
  return pytypes.SimpleNamespace(vertexai=real.vertexai, _api_client=real._api_client,
                                 aio=pytypes.SimpleNamespace(caches=service))


def _manager(client) -> GeminiContextCacheManager:
  with warnings.catch_warnings():  # experimental in ADK 2.13
    warnings.simplefilter("ignore")
    return GeminiContextCacheManager(client)


class GeminiCachingLlm(OfflineLlm):
  """``OfflineLlm`` that runs ADK's Gemini cache manager on each request, as ``google_llm`` does.

  It works on a copy (a cache hit strips the request), so ``received`` holds
  what the plugin sent. ``chain`` records, per call that came with a cache
  record, whether ADK found that record's prefix unchanged; ``cached`` the
  cache the call was served from.
  """

  chain: list[bool] = Field(default_factory=list)
  cached: list[Optional[str]] = Field(default_factory=list)
  session: Any = None
  """The session after the conversation (its events carry ADK's cache records)."""
  _client: Any = PrivateAttr(default=None)

  def __init__(self, client, **kw):
    super().__init__(**kw)
    self._client = client

  async def generate_content_async(self, llm_request, stream: bool = False):
    meta = None
    if llm_request.cache_config:
      manager = _manager(self._client)
      before = llm_request.cache_metadata
      if before is not None:
        self.chain.append(manager._generate_cache_fingerprint(llm_request, before.contents_count) == before.fingerprint)
      sent = llm_request.model_copy(deep=True)
      meta = await manager.handle_context_caching(sent)
      self.cached.append(sent.config.cached_content)
    async for response in super().generate_content_async(llm_request, stream):
      response.cache_metadata = meta
      yield response


def search_notes(query: str) -> dict:
  """Searches the research notes."""
  return {"query": query, "hits": [f"note on {query}: vendor A leads, vendor B follows."]}


def lookup_price(item: str) -> dict:
  """Looks up the list price of an item."""
  return {"item": item, "usd": 3}


def _turn(t: int, tool_every: int) -> str:
  if tool_every and (tool_every == 1 or t % tool_every == 2):
    return f"search vendor {t} pricing"
  return f"Turn {t}: " + "more notes on vendor pricing, support and rollout plans. " * 10


async def _converse(plugins, *, cache_config, client=None, turns=30, tool_every=5, tools=(search_notes,),
                    state=None, state_at=None):
  """A real Runner with the app's context cache config; returns the model (its ``received`` requests)."""
  model = GeminiCachingLlm(client or _client(), default=research_reply())
  ag = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.", tools=list(tools))
  app = App(name="cacheapp", root_agent=ag, plugins=list(plugins), context_cache_config=cache_config)
  runner = Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
  session = await runner.session_service.create_session(app_name="cacheapp", user_id=USER, state=state or {})
  for t in range(turns):
    msg = types.Content(role="user", parts=[types.Part(text=_turn(t, tool_every))])
    delta = (state_at or {}).get(t)
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=msg, state_delta=delta):
      pass
  model.session = await runner.session_service.get_session(app_name="cacheapp", user_id=USER, session_id=session.id)
  return model


def _payload_index(req) -> int:
  return next(i for i, c in enumerate(req.contents) if c.role == "user" and c.parts and (c.parts[0].text or "").startswith(PACK_HEAD))


def _dump(contents) -> list[str]:
  return [c.model_dump_json(exclude_none=True) for c in contents]


def _trims(received) -> list[int]:
  """Calls whose history before the payload does not extend the previous call's."""
  out = []
  for i in range(1, len(received)):
    prev = _dump(received[i - 1].contents[:_payload_index(received[i - 1])])
    cur = _dump(received[i].contents[:_payload_index(received[i])])
    if cur[:len(prev)] != prev:
      out.append(i)
  return out


# ------------------------------------------------------------ request fields
async def test_cache_config_and_the_previous_prompt_size_reach_the_model():
  """ADK gates caching (``min_tokens``, Gemini's floor) on the previous prompt's
  size: with the plugin that is the packed request's, the one actually sent."""
  recorder = Recorder()
  model = await _converse([recorder, ContextPackPlugin(window=4096)], cache_config=NO_CACHE_CREATION, turns=24, tool_every=0)
  received = model.received
  assert len(received) == len(recorder.requests) == 24
  originals = [count_request(r.contents, r.config, COUNTER) for r in recorder.requests]
  assert max(originals) > 4096, "the session must overflow the window without the plugin"
  for i, (req, orig) in enumerate(zip(received, recorder.requests)):
    assert req.cache_config == NO_CACHE_CREATION
    assert req.cache_metadata == orig.cache_metadata, f"call {i}: the plugin must not touch ADK's cache record"
    if i:
      assert req.cacheable_contents_token_count == _foreign_count(received[i - 1]), f"call {i}"
  last = len(received) - 1
  assert received[last].cacheable_contents_token_count < count_request(
      recorder.requests[last - 1].contents, recorder.requests[last - 1].config, COUNTER)


# ------------------------------------------------------- fingerprint chain
async def test_adks_gemini_fingerprint_chain_breaks_only_where_the_plugin_trims():
  """ADK re-checks the prefix it fingerprinted last call: with the plugin that
  prefix survives every call but a trim (tool turns included), far more often
  than under ADK's own ``ContextFilterPlugin``; with no plugin at all the
  request outgrows the window. A trim on a tool step also breaks the next
  call: ADK fingerprinted that step's prefix, payload included, and the
  record the step came with predates the trim."""
  packed = await _converse([ContextPackPlugin(window=4096)], cache_config=NO_CACHE_CREATION)
  received = packed.received
  assert len(received) == 36  # 30 turns + 6 tool steps
  trims = _trims(received)
  assert 2 <= len(trims) <= 5, trims
  # Every call but the first comes with the previous call's record.
  assert len(packed.chain) == 35
  broken = [i + 1 for i, ok in enumerate(packed.chain) if not ok]
  on_tool_steps = [t + 1 for t in trims if received[t].contents[-1].parts[0].function_response]
  assert broken == sorted(set(trims) | set(on_tool_steps))
  assert len(on_tool_steps) <= 1, trims
  # The session's records never fingerprint a payload: it is gone the next invocation.
  records = [e for e in packed.session.events if e.cache_metadata is not None]
  assert len(records) == 36
  for i, (req, event) in enumerate(zip(received, records)):
    if i + 1 not in on_tool_steps:
      assert event.cache_metadata.contents_count <= _payload_index(req), f"call {i}"

  unpacked = await _converse([], cache_config=NO_CACHE_CREATION)
  filtered = await _converse([ContextFilterPlugin(num_invocations_to_keep=3)], cache_config=NO_CACHE_CREATION)
  assert all(unpacked.chain) and len(unpacked.chain) == 35
  assert sum(filtered.chain) < sum(packed.chain) == 35 - len(broken)


async def test_tool_turns_create_no_cache_that_holds_the_payload():
  """Every turn calls a tool. On a tool step ADK caches everything before the
  function response, the payload included; such a cache misses from the next
  invocation on and is deleted there. The plugin holds creation on those steps,
  so one cache of the stable prefix serves the session, as without the plugin."""
  service = _CacheService()
  packed = await _converse([ContextPackPlugin(window=16384)], cache_config=KEEP_ONE_CACHE, client=_client(service),
                           turns=20, tool_every=1)
  assert len(packed.received) == 40 and not _trims(packed.received)
  assert len(service.created) == 1 and service.deleted == 0
  for config in service.created:
    assert not any(PACK_HEAD in (p.text or "") for c in config.contents or () for p in c.parts or ())
  assert all(packed.chain)
  assert all(packed.cached[2:]), packed.cached  # created on the first call with a previous prompt size and record

  plain_service = _CacheService()
  unpacked = await _converse([], cache_config=KEEP_ONE_CACHE, client=_client(plain_service), turns=20, tool_every=1)
  assert len(plain_service.created) == 1
  assert sum(c is not None for c in packed.cached) >= sum(c is not None for c in unpacked.cached) - 1


async def test_holding_creation_keeps_the_min_tokens_gate_for_prefix_marking_models():
  """Claude and LiteLLM read the previous prompt size as their ``min_tokens``
  gate (``_prompt_cache.resolve_cache_config``): the plugin's hold must not
  turn a below-minimum tool step into a marked one, nor unmark one above it."""
  for config, marked in ((ContextCacheConfig(min_tokens=10**9), False), (ContextCacheConfig(min_tokens=0), True)):
    model = await _converse([ContextPackPlugin(window=16384)], cache_config=config, turns=4, tool_every=1)
    steps = [r for r in model.received if r.contents[-1].parts[0].function_response]
    assert len(steps) == 4
    for req in model.received[1:]:
      assert (_prompt_cache.resolve_cache_config(req) is not None) is marked


# -------------------------------------------------------------- tool scoping
@pytest.mark.parametrize("mode", ["hard", "mask"])
async def test_step_tool_scoping_changes_adks_gemini_fingerprint_only_when_the_step_does(mode):
  """Gemini's cache holds the tools and the tool config: a new step's tools is
  a new cache in both modes (mask keeps the declarations byte-stable, for the
  prefix-marking providers, and changes ``allowed_function_names``)."""
  model = await _converse(
      [ContextPackPlugin(window=16384, policy=PackPolicy(tool_scoping=mode))], cache_config=NO_CACHE_CREATION,
      turns=6, tool_every=0, tools=(search_notes, lookup_price),
      state={"tools": ["search_notes"]}, state_at={3: {"tools": ["lookup_price"]}},
  )
  manager = _manager(_client())
  heads = [manager._generate_cache_fingerprint(r, 0) for r in model.received]  # system instruction + tools + tool config
  assert heads[0] == heads[1] == heads[2] != heads[3] == heads[4] == heads[5]
  assert model.chain == [True, True, False, True, True]
  a, b = model.received[2].config, model.received[3].config
  if mode == "mask":
    assert _dump(a.tools) == _dump(b.tools) and a.tool_config != b.tool_config
  else:
    assert _dump(a.tools) != _dump(b.tools)


# -------------------------------------------------------- prefix-marking models
async def test_the_conversation_breakpoint_of_prefix_marking_models_lands_on_the_payload():
  """Claude (``anthropic_llm``) and LiteLLM mark the request's last block. With
  the plugin that is the payload, or a tool result after it, and the next
  invocation sends the user's own turn there: the marked conversation prefix
  is read back only within a tool loop. The system instruction and tools
  (their own breakpoints) and the history before the payload stay byte-stable.
  Without the plugin every marked prefix is read back, until the window overflows."""
  packed = await _converse([ContextPackPlugin(window=32768)], cache_config=NO_CACHE_CREATION)
  unpacked = await _converse([], cache_config=NO_CACHE_CREATION)

  def reread(received) -> list[bool]:
    return [_dump(cur.contents)[:len(prev.contents)] == _dump(prev.contents) for prev, cur in zip(received, received[1:])]

  assert all(reread(unpacked.received))
  tool_steps = [i for i, r in enumerate(packed.received) if r.contents[-1].parts[0].function_response]
  assert len(tool_steps) == 6
  assert [i + 1 for i, ok in enumerate(reread(packed.received)) if ok] == tool_steps
  for req in packed.received:
    last = req.contents[-1]
    assert last is req.contents[_payload_index(req)] or last.parts[0].function_response
  assert len({r.config.system_instruction for r in packed.received}) == 1
  assert len({json.dumps(_dump(r.config.tools)) for r in packed.received}) == 1
  assert not _trims(packed.received)
