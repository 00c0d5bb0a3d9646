"""``ContextPackPlugin``: every model call of an ADK app goes out as a Context Pack.

One line on the app: ``App(..., plugins=[ContextPackPlugin()])``. The plugin
compiles the request in ``before_model_callback``, rewrites it in place,
stores a ``manifest.json`` through the app's ArtifactService, and learns the
real tokenizer ratio in ``after_model_callback``. A pack whose request a later
callback answers instead of the model is taken back from state in
``on_event_callback``.

It fails open: ADK turns a plugin exception into a ``RuntimeError`` that
aborts the user's run, so any internal fault sends the request unmodified,
logs once per kind, and is recorded. Configuration errors fail at
construction. A pack that does not fit under ``overflow="fail_loud"`` is not
a fault but the user's choice: it raises ``ContextPackOverflow`` into the run.

The rewritten contents, in the original order:

- the contents ADK added for the agent's instructions (a static
  instruction's files and the dynamic instruction; see
  ``_instruction_positions``) and the invocation's
  ``RunConfig.model_input_context``: sent unchanged where ADK put them, pinned
  and charged to the budget, never conversation history;
- the kept conversation tail;
- the payload message, in place of the user turn: a text part with the pack
  ending in ``"USER REQUEST (VERBATIM):\n"``, then the user's own parts,
  unchanged and in their order (a leading plain text part is joined onto the
  pack part, so a one-text message reads exactly as the pack was rendered);
- the invocation's in-flight steps (tool calls and results).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import threading
import time
import traceback
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Optional, Sequence, Union

from google.genai import types
from opentelemetry import trace

from ..audit.terminal import shown
from ..calibration import Calibrator
from ..core.allocator import ContextBudgetExhausted
from ..core.compiler import CallInputs, CompiledPack, CompilerSession
from ..core.costing import GEMINI_2_MEDIA, MediaCounter, TokenCounter, count_parts, media_rules_for_model
from ..core.items import FINISHED_STEP, MAX_TOKENS, PLACED_BEFORE_REQUEST, PLACED_FIRST, PLACEMENT, Item, Layer, Trust
from ..core.policy import PRESETS, OverflowPolicy, PackPolicy, ToolScoping
from ..core.rank import HistoryIndex, Ranker, ScanHistoryIndex
from ..core.render import INTERPRETATION_CONTRACT
from ..core.windows import ModelWindows, UnknownModelWindow
from ..log_limit import RateLimitedLog
from ..tokenizers import get_counter
from . import artifact_listing, preload_memory, sources
from .guard import check_request, pending_calls, pending_labels
from .manifest_store import ManifestWriter, caller_invocation
from .state_schema import (
    CALIBRATION_KEY, LAST_FAULT_KEY, LAST_PACK_KEY, KnowledgeItem, PlanState, StateKeys, steps_key, tail_key,
    read_state, unread_keys,
)
from .tool_scope import is_protected, scope_tools, skill_provided_names

if TYPE_CHECKING:
  from google.adk.agents.callback_context import CallbackContext
  from google.adk.agents.invocation_context import InvocationContext
  from google.adk.events.event import Event
  from google.adk.models.llm_request import LlmRequest
  from google.adk.models.llm_response import LlmResponse
  from google.adk.tools.base_tool import BaseTool
  from google.adk.tools.tool_context import ToolContext

try:  # ADK types are only needed at runtime for isinstance-free duck typing.
  from google.adk.plugins.base_plugin import BasePlugin
except ImportError as e:  # pragma: no cover - ADK is a hard dependency
  raise ImportError("aether_frame.adk needs google-adk installed") from e

try:  # How ADK labels a dynamic instruction it sends as a user content.
  from google.adk.flows.llm_flows.instructions import _INSTRUCTION_BEGIN, _INSTRUCTION_END, _INSTRUCTION_PREAMBLE
  _LABEL_HEAD: Optional[str] = f"{_INSTRUCTION_PREAMBLE}\n{_INSTRUCTION_BEGIN}\n"
  _LABEL_TAIL: Optional[str] = f"\n{_INSTRUCTION_END}"
except ImportError:  # pragma: no cover - an ADK that does not label them
  _LABEL_HEAD = _LABEL_TAIL = None

try:  # ADK's model that fails over to backups (experimental in 2.x)
  from google.adk.models._fallback_model import FallbackModel as _FallbackModel
except ImportError:  # pragma: no cover - an ADK without it
  _FallbackModel = None

logger = logging.getLogger(__name__)
_tracer = trace.get_tracer("aether_frame")

_MAX_SESSIONS = 256
DEFAULT_SESSION_CACHE_BYTES = 2 * 2**30
"""Warm caches kept in all, by ``CompilerSession.held_bytes`` (~100 bytes per history token, plus
media payloads): ~21M history tokens of text. 256 caches of 10,000-event sessions held ~21 GB."""
_ARTIFACT_BACKOFF_SECONDS = 60.0
_OWN_ARTIFACT_PREFIX = "context_pack/"


class ContextPackOverflow(ContextBudgetExhausted):
  """The pack does not fit and the policy's overflow is ``fail_loud``.

  Raised into ADK on purpose: sending the request unmodified would go over
  the budget, and sending it cut would be the silent cut the user opted out
  of. ADK re-raises a plugin's exception as a ``RuntimeError`` whose
  ``__cause__`` is this error (agent callbacks raise it as is).
  """

  def __init__(self, agent: str, model: str, cause: ContextBudgetExhausted):
    Exception.__init__(
        self, f"agent {agent!r} (model {model!r}): request not sent, the context pack does not fit "
        f"and overflow is fail_loud: {cause}"
    )
    self.agent, self.model = agent, model
    self.needs, self.usable, self.window = dict(cause.needs), cause.usable, cause.window


@dataclass
class _Sent:
  """One packed model call, from its before- to its after-model callbacks.

  ``actions`` is that call's event actions, shared by its before and after
  callbacks: a response is compared only with its own request's estimate.
  ``request`` is the request object itself, until the first response: a
  ``FallbackModel`` renames it to the model it hands it to, so by then it
  names the model that answered (``model`` takes that name, and the request,
  media and all, is let go). ``cache_before``: the context-cache record the
  request came with (see ``_keep_cache_chain``).
  """

  actions: Any
  model: str
  estimate: int
  cache: Any = None
  """A weak reference to the compiler cache that packed it (for a take-back)."""
  request: Any = None
  payload_at: Optional[int] = None
  undo: Optional["_Undo"] = None
  cache_before: Any = None
  observed: bool = False
  """Calibrated: a streamed call reports its prompt count on more than one chunk."""
  limit: Optional[int] = None
  """The window minus the output reserve: what the model's own prompt count must stay under."""


_MISSING = object()
_MAX_CALLS = 8 * _MAX_SESSIONS
"""Packed calls remembered until their responses (see ``ContextPackPlugin._calls``): a call
is forgotten only after this many newer ones, however many sessions are in flight."""


@dataclass
class _Rewrite:
  """The request as it will be sent, and what the validity guard found."""

  contents: list[types.Content]
  config: Any
  sent: set[int]
  """Positions of the original contents it keeps."""
  guard: Any
  fallback_guard: Any
  """The minimal safe pack's guard result, when the pack's was refused (None: it was not)."""
  estimate: int
  """The request's tokens by our count."""
  over: Optional[ContextBudgetExhausted]
  """The minimal safe pack is over the usable window (None: it fits, or was not needed)."""


@dataclass
class _Undo:
  """What a pack changed, to take back if ADK never sends its request.

  ``calls`` is the invocation's model-call counter and its count at compile
  time: ADK counts a call only once every before-model callback let it through.
  ``tail_hint`` and ``steps_hint`` are the cuts the compile started from: the cache
  goes back to them, so it agrees again with the state the take-back restores.
  """

  calls: tuple[Any, int]
  tail_hint: Optional[str]
  steps_hint: tuple[Optional[str], Optional[str]] = (None, None)
  prior: dict[str, Any] = field(default_factory=dict)
  written: dict[str, Any] = field(default_factory=dict)

  def never_sent(self) -> bool:
    counter, made = self.calls
    return getattr(counter, "_number_of_llm_calls", None) == made


@dataclass
class _SessionCache:
  """Per (session, agent) compiler state, so warm calls are incremental."""

  compiler: CompilerSession
  fps: list[str] = field(default_factory=list)
  payloads: list[tuple] = field(default_factory=list)
  """Per known content, its parts' payload objects (see ``_payloads``)."""
  spans: list[tuple[int, int]] = field(default_factory=list)
  events: sources.EventIndex = field(default_factory=sources.EventIndex)
  rewrites: int = 0
  """``events.rewrites`` when the history was last synced."""
  watched: list[int] = field(default_factory=list)
  """History positions ADK may rewrite in place on a later call (see ``_carries_skill_body``)."""
  tail_hint: Optional[str] = None
  """The tail cut this cache last wrote to its lane's state key (see ``ContextPackPlugin._tail_hint``)."""
  steps_hint: tuple[Optional[str], Optional[str]] = (None, None)
  """(invocation id, newest finished step dropped): the in-flight cut's hysteresis."""
  artifact_names: list[str] = field(default_factory=list)
  """The session's artifacts as last listed (ours included, in the store's order)."""
  artifacts_retry_at: float = 0.0
  open_calls: sources.OpenCalls = field(default_factory=sources.OpenCalls)
  """The calls no later content of the synced history answers (positions: history indices)."""



class _ByObject:
  """Values that live exactly as long as an object (an ADK invocation context, a request).

  A step's tool mask must hold until that step's tools have run: kept in a
  table capped by session count, 300 sessions in flight pushed masks out and
  masked tools ran. Entries go when ADK drops the context.
  """

  def __init__(self) -> None:
    self._by_id: dict[int, tuple[weakref.ref, dict]] = {}
    self._lock = threading.Lock()  # a context's weakref callback may run in any thread

  def get(self, ic: Any, key: tuple) -> Any:
    entry = self._by_id.get(id(ic))
    return entry[1].get(key) if entry is not None and entry[0]() is ic else None

  def put(self, ic: Any, key: tuple, value: Any) -> None:
    with self._lock:
      entry = self._by_id.get(id(ic))
      if entry is None or entry[0]() is not ic:
        at = id(ic)
        ref = weakref.ref(ic, lambda r, at=at: self._drop(at, r))
        entry = self._by_id[at] = (ref, {})
      entry[1][key] = value

  def pop(self, ic: Any, key: tuple) -> None:
    entry = self._by_id.get(id(ic))
    if entry is not None and entry[0]() is ic:
      entry[1].pop(key, None)

  def _drop(self, at: int, ref: weakref.ref) -> None:
    with self._lock:
      entry = self._by_id.get(at)
      if entry is not None and entry[0] is ref:
        del self._by_id[at]

  def __len__(self) -> int:
    return len(self._by_id)


_PACKED = _ByObject()
"""Requests already packed, by the plugin or callbacks that packed them: packing a pack again
(a wrapped ``context_pack_callbacks`` the plugin cannot recognise) nests one inside the other."""


class ContextPackPlugin(BasePlugin):
  """Compiles every LlmRequest into a token-budgeted, deterministic Context Pack."""

  def __init__(
      self,
      *,
      policy: Optional[PackPolicy] = None,
      agent_policies: Optional[Mapping[str, PackPolicy]] = None,
      window: Optional[int] = None,
      window_overrides: Optional[Mapping[str, int]] = None,
      encoding: str = "o200k_base",
      counter: Optional[TokenCounter] = None,
      ranker: Optional[Ranker] = None,
      history_index_factory: Optional[Callable[[], HistoryIndex]] = None,
      working_memory: Any = None,
      calibrator: Optional[Calibrator] = None,
      manifest_writer: Optional[ManifestWriter] = None,
      include_artifacts: bool = True,
      state_keys: Union[StateKeys, Mapping[str, str], None] = None,
      artifact_list_timeout: float = 2.0,
      memory_search_timeout: float = 5.0,
      session_cache_bytes: int = DEFAULT_SESSION_CACHE_BYTES,
      name: str = "aether_frame_context_pack",
      _fault_injector: Optional[Callable[[], None]] = None,
  ):
    if not isinstance(name, str) or not name.strip():
      raise ValueError(f"name must be a non-empty string (ADK tells plugins apart by it), got {name!r}")
    super().__init__(name)
    if policy is not None and not isinstance(policy, PackPolicy):
      raise TypeError(f"policy must be a PackPolicy, got {_not_a_policy(policy)}")
    if agent_policies is not None and not isinstance(agent_policies, Mapping):
      raise TypeError(f"agent_policies must be a mapping of agent name to PackPolicy, got {type(agent_policies).__name__}")
    for agent, pol in (agent_policies or {}).items():
      if not isinstance(pol, PackPolicy):
        raise TypeError(f"agent_policies[{agent!r}] must be a PackPolicy, got {_not_a_policy(pol)}")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or not 0 < window <= MAX_TOKENS):
      raise ValueError(f"window must be a positive int of at most 2**40 tokens, got {window!r}")
    missing = [m for m in ("count", "count_many", "describe") if not callable(getattr(counter, m, None))]
    missing += [a for a in ("name", "exact", "version") if not hasattr(counter, a)]  # the manifest names them
    if counter is not None and missing:
      raise TypeError(f"counter must be a TokenCounter (see aether_frame.tokenizers.get_counter); "
                      f"{type(counter).__name__} has no {', '.join(missing)}")
    if ranker is not None and not callable(getattr(ranker, "rank", None)):
      raise TypeError(f"ranker must be a Ranker with a rank(query, items, *, layer, now) method "
                      f"(see aether_frame.retrieval.default_ranker), got {type(ranker).__name__}")
    if history_index_factory is not None and not callable(history_index_factory):
      raise TypeError(f"history_index_factory must be a callable returning a HistoryIndex, "
                      f"got {type(history_index_factory).__name__}")
    if working_memory is not None and not callable(getattr(working_memory, "list_notes", None)):
      raise TypeError(f"working_memory must have an async list_notes(app_name, user_id, session_id, step_id) "
                      f"(see aether_frame.stores.WorkingMemory), got {type(working_memory).__name__}")
    if manifest_writer is not None and not isinstance(manifest_writer, ManifestWriter):
      raise TypeError(f"manifest_writer must be a ManifestWriter, got {type(manifest_writer).__name__}")
    if not isinstance(include_artifacts, bool):
      raise TypeError(f"include_artifacts must be True or False, got {include_artifacts!r}")
    for label, seconds in (("artifact_list_timeout", artifact_list_timeout), ("memory_search_timeout", memory_search_timeout)):
      if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
          or not math.isfinite(seconds) or seconds <= 0):
        raise ValueError(f"{label} must be a positive number of seconds, got {seconds!r}")
    if not isinstance(session_cache_bytes, int) or isinstance(session_cache_bytes, bool):
      raise TypeError(f"session_cache_bytes must be an int (bytes), got {type(session_cache_bytes).__name__}")
    if session_cache_bytes <= 0:
      raise ValueError(f"session_cache_bytes must be positive, got {session_cache_bytes!r}")
    self.policy = policy or PackPolicy()
    self.agent_policies = dict(agent_policies or {})
    self.window = window
    self.windows = ModelWindows(window_overrides)
    self.counter = counter or get_counter(encoding)
    if ranker is None:
      from ..retrieval import default_ranker  # local: retrieval is optional weight
      ranker = default_ranker()
    self.ranker = ranker
    self._index_factory = history_index_factory or self._default_index_factory
    self.working_memory = working_memory
    self.manifests = manifest_writer or ManifestWriter()
    self.include_artifacts = include_artifacts
    self.state_keys = state_keys if isinstance(state_keys, StateKeys) else StateKeys.model_validate(state_keys or {})
    self.artifact_list_timeout = artifact_list_timeout
    self.memory_search_timeout = memory_search_timeout
    if calibrator is not None and not isinstance(calibrator, Calibrator):
      raise TypeError(f"calibrator must be a Calibrator (aether_frame.calibration), got {type(calibrator).__name__}")
    self.calibrator = calibrator or Calibrator()
    """Its settings (alpha, alpha_up, bounds) apply to every session's own samples."""
    self._media_counters: dict[str, TokenCounter] = {}
    self.faults = 0
    self._sessions: OrderedDict[tuple, _SessionCache] = OrderedDict()
    self.session_cache_bytes = session_cache_bytes
    """Warm caches beyond this (``CompilerSession.held_bytes``) go, least recently used first;
    an evicted session is rebuilt from its events on its next call."""
    self._cache_bytes: dict[tuple, int] = {}
    self._cached_bytes = 0
    self._calls: OrderedDict[int, _Sent] = OrderedDict()
    """id(actions) -> ``_Sent`` of the latest packed calls, kept for all their responses
    (two invocations of one session can each have a call out at once), apart from the
    session caches: evicting a busy session's cache lost its calibration samples."""
    self._busy: dict[tuple, list] = {}
    """(event loop, compiler key) -> [lock, holders]: a key's lock lives only while someone holds or awaits it."""
    self._owned: set[tuple] = set()
    """Compiler keys whose shared cache a compile uses now, in any thread (see ``_serial``)."""
    self._guard = threading.Lock()
    """Guards ``_busy``, ``_owned``, ``_sessions`` and the small tables against other threads' loops
    (never held across an await, never taken twice)."""
    self._logged = RateLimitedLog(logger)
    self._fault_injector = _fault_injector
    self._listings: OrderedDict[tuple, Optional[artifact_listing.ListingEdit]] = OrderedDict()
    self._allowed = _ByObject()
    """Per invocation context and compiler key: the functions its last masked call allows."""

  def _default_index_factory(self) -> HistoryIndex:
    make = getattr(self.ranker, "new_history_index", None)
    return make() if callable(make) else ScanHistoryIndex(self.ranker)

  # ----------------------------------------------------------------- callbacks
  async def before_model_callback(
      self, *, callback_context: CallbackContext, llm_request: LlmRequest
  ) -> Optional[LlmResponse]:
    # ADK runs the app's plugins, then the agent's own callbacks: an agent with
    # ``context_pack_callbacks`` is left to them, or its request is packed twice.
    if _packed_by_agent(callback_context):
      return None
    for later in _plugins_after(self, callback_context):
      self._log_once("order:" + later, logging.WARNING,
                     "plugin %r runs after ContextPackPlugin and may change the request: what it adds is "
                     "outside the pack's budget; list ContextPackPlugin last in App(plugins=[...])", later)
    return await self._before_model(callback_context, llm_request)

  async def _before_model(self, callback_context, llm_request):
    started = time.perf_counter()
    packer = _PACKED.get(llm_request, ())
    if packer is not None and packer is not self:
      self._log_once("packed:" + callback_context.agent_name, logging.WARNING,
                     "agent %s: a request already packed by %r reached %r, which leaves it alone (packing "
                     "it again would nest one pack in the other). Two packers see this agent's calls: "
                     "two ContextPackPlugins in App(plugins=[...]) (`adk --extra_plugins` adds one to the "
                     "app's own), or the plugin and a wrapped context_pack_callbacks callback, which the "
                     "plugin cannot recognise; keep one of them",
                     callback_context.agent_name, packer.name, self.name)
      return None
    if _server_keeps_history(callback_context, llm_request):
      # Whatever is sent joins the conversation the server keeps: a pack would
      # pile up there call after call, and the budget cannot reach that history.
      self._log_once("interactions:" + callback_context.agent_name, logging.WARNING,
                     "agent %s uses Gemini's Interactions API, which keeps the conversation server-side; "
                     "its requests are sent unmodified, without a context pack or manifest",
                     callback_context.agent_name)
      return None
    if _is_live(callback_context):
      # Live, the callback screens a copy of one message (the connection sends
      # the message and its own history): a pack built from it is never sent.
      self._log_once("live:" + callback_context.agent_name, logging.WARNING,
                     "agent %s runs a live (bidi) session, whose model callback only screens a copy of each "
                     "message; it is not packed and writes no manifest", callback_context.agent_name)
      return None
    original = (llm_request.contents, llm_request.config, llm_request.tools_dict,
                getattr(llm_request, "cacheable_contents_token_count", None))
    # One span for all of it (read, compile, rewrite, guard, manifest): a fault
    # anywhere shows on it, with what became of the request.
    with _tracer.start_as_current_span("aether_frame.compile", record_exception=False,
                                       set_status_on_exception=False) as span:
      span.set_attribute("aether_frame.agent", callback_context.agent_name)
      try:
        # A request sent unmodified is not estimated, so nothing of an earlier
        # call may be left for after_model to compare it with.
        key = self._key(callback_context)
        async with self._serial(key) as shared:
          # A call that is not packed leaves no mask of an earlier call in force.
          self._allowed.pop(_invocation_of(callback_context), key)
          self._calls.pop(id(callback_context.actions), None)
          if not _over_call_limit(callback_context):
            await self._compile_into(callback_context, llm_request, started, shared=shared)
            if llm_request.contents is not original[0]:
              _PACKED.put(llm_request, (), self)
      except ContextBudgetExhausted as e:
        if self._policy_for(callback_context.agent_name).overflow is OverflowPolicy.FAIL_LOUD:
          _span_fault(span, e, "run stopped (overflow policy fail_loud)")
          raise ContextPackOverflow(callback_context.agent_name, llm_request.model or "", e) from e
        self._record_fault(callback_context, e, "before_model")
      except Exception as e:  # fail-open: never abort the user's run
        self._put_back(callback_context, llm_request, original)
        self._record_fault(callback_context, e, "before_model")
    return None

  def _put_back(self, ctx, llm_request, original: tuple) -> None:
    """After a fault, the request goes out as it came, as the fault record says, even when
    the fault came after the rewrite (the compile's bookkeeping), with no call of it on record."""
    contents, config, tools_dict, cacheable = original
    if llm_request.contents is contents and llm_request.config is config and llm_request.tools_dict is tools_dict:
      return
    llm_request.contents, llm_request.config, llm_request.tools_dict = contents, config, tools_dict
    if hasattr(llm_request, "cacheable_contents_token_count"):
      llm_request.cacheable_contents_token_count = cacheable
    self._calls.pop(id(ctx.actions), None)
    try:
      self._allowed.pop(_invocation_of(ctx), self._key(ctx))
    except Exception:  # the key itself may be what failed; no mask was noted then
      pass

  async def after_model_callback(
      self, *, callback_context: CallbackContext, llm_response: LlmResponse
  ) -> Optional[LlmResponse]:
    try:
      usage = getattr(llm_response, "usage_metadata", None)
      actual = getattr(usage, "prompt_token_count", None) if usage else None
      sent = self._call_of(callback_context.actions)
      if sent is None:
        return None
      if sent.request is not None:
        # The provider's count is its own tokenizer's: learn it for the model
        # that answered (a FallbackModel's backup), not the one first named.
        sent.model = getattr(sent.request, "model", None) or sent.model
        sent.request = None
      _keep_cache_chain(sent, llm_response)
      if actual and not sent.observed:
        sent.observed = True
        answered = sent.model
        self.calibrator.observe(answered, sent.estimate, actual)
        # The session's own calibration drives its budgets, so any worker that
        # picks the session up compiles the same pack.
        session_cal = self._session_calibration(callback_context.state)
        session_cal.observe(answered, sent.estimate, actual)
        callback_context.state[CALIBRATION_KEY] = session_cal.to_dict(settings=False)
        if sent.limit is not None and isinstance(actual, int) and actual > sent.limit:
          # Calibration learns from this; the call itself already went out too large.
          self._log_once(f"over-window:{answered}", logging.WARNING,
                         "model %s counted %d prompt tokens for a pack of %d by our count, over the window minus "
                         "the output reserve (%d); later packs of this session are sized for %.2fx our count",
                         answered, actual, sent.estimate, sent.limit,
                         session_cal.scale(answered, self._policy_for(callback_context.agent_name).calibration_margin))
    except Exception as e:
      self._record_fault(callback_context, e, "after_model")
    return None

  async def before_tool_callback(
      self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
  ) -> Optional[dict[str, Any]]:
    """Mask scoping, enforced where the model's adapter does not send it.

    Gemini applies ``allowed_function_names``; ADK's OpenAI, LiteLLM and
    Anthropic adapters drop it, so a masked tool the model calls anyway is
    answered with an error here instead of being run. Only tools the step
    declared to the model and masked are refused: a call to a tool the model
    was never shown comes from the framework (ADK's ``ReflectAndRetryModelPlugin``
    answers a model error with a call to its ``adk_handle_model_error``).
    """
    try:
      mask = self._allowed.get(_invocation_of(tool_context), self._key(tool_context))
      if mask is None:
        return None
      allowed, declared = mask
      name = getattr(tool, "name", None)
      if name in allowed or name not in declared or is_protected(name or "", tool):
        return None
      return {"error": f"tool {name!r} is not available in this step; the step allows: {sorted(allowed) or 'none'}"}
    except Exception as e:  # fail-open: the tool runs as it would without the plugin
      self._record_fault(tool_context, e, "before_tool", outcome="tool call not checked against the step's tools")
      return None

  def _note_allowed(self, ctx, scoped) -> None:
    """The functions this call's mask allows and those it declared, for ``before_tool_callback``
    (None: no mask in force)."""
    key, ic = self._key(ctx), _invocation_of(ctx)
    if scoped.mode is ToolScoping.MASK and scoped.allowed is not None:
      self._allowed.put(ic, key, (frozenset(scoped.allowed), frozenset(d.name for d in scoped.declarations)))
    else:
      self._allowed.pop(ic, key)

  def _call_of(self, actions: Any) -> Optional[_Sent]:
    sent = self._calls.get(id(actions))
    return sent if sent is not None and sent.actions is actions else None

  def _add_call(self, sent: _Sent) -> None:
    with self._guard:
      self._calls[id(sent.actions)] = sent  # the record holds ``actions``: its id is not reused meanwhile
      while len(self._calls) > _MAX_CALLS:
        self._calls.popitem(last=False)

  async def after_agent_callback(self, *, agent: Any, callback_context: CallbackContext) -> None:
    """A lane ADK opened for one tool call (a ``single_turn`` delegation) ends with its agent's run,
    and its warm cache with it: kept, every delegation held one until the least recently used
    were pushed out, other sessions' warm caches among them."""
    try:
      key = self._key(callback_context)
      if not _one_call_lane(key, agent):
        return None
      with self._guard:
        if self._sessions.pop(key, None) is not None:
          self._cached_bytes -= self._cache_bytes.pop(key, 0)
          self.manifests.forget_stream(key)
    except Exception as e:  # fail-open: a cache left behind is only memory
      self._record_fault(callback_context, e, "after_agent", outcome="a finished lane's cache was kept")
    return None

  async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Optional[Event]:
    """Takes back what a pack wrote to state when its request was never sent.

    The agent's own before-model callbacks, and plugins listed after this
    one, run after the pack is built: one that returns a response (a
    guardrail) skips the model and every after-model callback, yet its event
    carries the pack's writes. Before that event is stored, the last-pack
    pointer and the tail hint go back to the last pack sent, so no worker
    keeps a cut no model saw. The manifest stays stored: an artifact version
    cannot be withdrawn, and no pointer names it.
    """
    try:
      actions = getattr(event, "actions", None)
      delta = getattr(actions, "state_delta", None)
      if not delta or LAST_PACK_KEY not in delta:
        return None
      sent = self._call_of(actions)
      if sent is not None and sent.undo is not None and sent.undo.never_sent():
        self._take_back(invocation_context.session.state, delta, sent)
    except Exception as e:
      self._record_fault(invocation_context, e, "on_event", outcome="state left as the pack wrote it")
    return None

  def _take_back(self, state: dict, delta: dict, sent: _Sent) -> None:
    """Restores the state keys, tail hint and estimate from before an unsent pack."""
    undo = sent.undo
    for key, old in undo.prior.items():
      if key in delta and delta[key] is undo.written.get(key, _MISSING):
        del delta[key]  # the store still holds the old value
        if old is _MISSING:
          state.pop(key, None)
        else:
          state[key] = old
    cache = sent.cache() if sent.cache is not None else None
    if cache is not None:  # (a cache evicted since has no hint to restore)
      cache.tail_hint = undo.tail_hint
      cache.steps_hint = undo.steps_hint
    with self._guard:
      self._calls.pop(id(sent.actions), None)

  # ------------------------------------------------------------------ compile
  @contextlib.asynccontextmanager
  async def _serial(self, key: tuple):
    """One compile at a time per compiler key.

    ADK does not serialize a session's invocations (a user sending again
    before the reply). A compile syncs the key's compiler with its request's
    history and then awaits the artifact listing and the memory search; a
    second invocation syncing it meanwhile made the first compile, and
    describe in its manifest, the second's history. The manifest write stays
    inside: the key's manifests are then stored in the order they were
    compiled, which replay and diff read as call order.

    Yields whether this compile may use the key's shared cache. The lock is
    per event loop (sync ``Runner.run`` gives each thread its own; a lock
    shared across loops leaves a waiter asleep for good). A second thread on
    the same key does not wait for the first: it compiles from a fresh cache,
    which gives the same pack (a warm compile equals a cold one).
    """
    at = (asyncio.get_running_loop(), key)
    with self._guard:
      entry = self._busy.get(at)
      if entry is None:
        entry = self._busy[at] = [asyncio.Lock(), 0]
      entry[1] += 1
    try:
      async with entry[0]:
        with self._guard:
          shared = key not in self._owned
          self._owned.add(key)
        try:
          yield shared
        finally:
          if shared:
            with self._guard:
              self._owned.discard(key)
    finally:
      with self._guard:
        entry[1] -= 1
        if entry[1] == 0 and self._busy.get(at) is entry:
          del self._busy[at]

  def _key(self, ctx) -> tuple:
    """One compiler per session, agent, branch and workflow node path: parallel
    runs of one agent (workflow workers, or ``ctx.run_node`` lanes that share a
    branch) see different histories and must not reset each other's; a shared
    compiler re-synced by one lane while another awaits compiles the wrong
    history. Node paths are stable across turns (``wf@1/writer@2``), so each
    lane stays warm. A top-level path (``router@2``) is not a lane: ADK numbers
    each run of the agent, and a transfer back to it runs it anew on the same
    conversation; keyed apart, two compilers cut one tail by turns and the
    cached prefix broke on every call. For the same reason a path below one
    (``router@2/spec@1``, the sub-agent of the router's second run) is keyed
    without the top run's number."""
    s = ctx.session
    ic = _invocation_of(ctx)
    path = getattr(ctx, "node_path", None) or getattr(ic, "node_path", None)
    if not isinstance(path, str) or "/" not in path:
      path = None
    else:
      top, _, below = path.partition("/")
      path = top.partition("@")[0] + "/" + below
    return (s.app_name, s.user_id, s.id, ctx.agent_name, getattr(ic, "branch", None), path)

  def _policy_for(self, agent: str) -> PackPolicy:
    return self.agent_policies.get(agent, self.policy)

  def _session_calibration(self, state) -> Calibrator:
    """The session's samples under this plugin's settings, never its state's.

    Anyone can write session state: stored bounds are ignored (a huge
    ``max_ratio`` empties the budget) and state that does not read back as
    stored is replaced, so it cannot fault every later call.
    """
    raw = state.get(CALIBRATION_KEY)
    cal = Calibrator.from_dict(raw, settings=self.calibrator)
    stored = cal.to_dict(settings=False)
    if raw is not None and (not isinstance(raw, Mapping) or raw.get("models") != stored["models"]):
      self._log_once("calibration-state", logging.WARNING,
                     "session state[%r] is unreadable or out of bounds; replaced with what could be read: %s",
                     CALIBRATION_KEY, stored)
      state[CALIBRATION_KEY] = stored
    return cal

  def _tail_hint(self, cache: _SessionCache, stored: Any) -> Optional[str]:
    """The cut the tail keeps: this lane's own, unless another worker moved it since.

    The state holds the last cut any worker wrote for the agent's lane (each
    workflow lane has a key of its own, see ``state_schema.tail_key``, one per
    compiler key). When it no longer holds the cut this warm cache last wrote
    there, another worker served the lane meanwhile, and its cut is the one a
    single worker would keep; the cache's older cut would re-trim turns that
    worker kept. The record lives on the cache, so it goes only with the cache
    (a separate, capped table once forgot it and took another worker's cut for
    its own). A stored None is a cut too (that worker's tail started after
    the last turn: no hint); a missing key or a value that is not a string
    (anyone can write state) is ignored.
    """
    if (stored is None or isinstance(stored, str)) and stored != cache.tail_hint:
      return stored
    return cache.tail_hint

  def _counter_for(self, models: Sequence[Optional[str]], config: Any = None) -> TokenCounter:
    """``self.counter``, costing media by the rules of ``models`` (Gemini 3 charges
    1,120 tokens for an image 2.x charged 258 for; of a FallbackModel's models, the
    dearest) under the request's ``media_resolution``; the same text counts."""
    rules = max((media_rules_for_model(m) for m in models), key=lambda r: bool(r.levels), default=GEMINI_2_MEDIA)
    rules = rules.for_request(getattr(config, "media_resolution", None))
    if rules is GEMINI_2_MEDIA:
      return self.counter
    counter = self._media_counters.get(rules.name)
    if counter is None:
      counter = self._media_counters[rules.name] = MediaCounter(self.counter, rules)
    return counter

  def _window_for(self, model: Optional[str], backups: Sequence[str]) -> int:
    """The request model's window, or for a ``FallbackModel`` the smallest of its models'.

    ADK builds the request once, names the primary on it, and any of the
    models may answer it: a pack sized for the primary overflows a smaller
    backup, just when the primary is failing. A backup the registry does not
    know cannot be sized for; it is named in a warning, not a fault.
    """
    window = self.windows.lookup(model)
    for name in backups:
      try:
        window = min(window, self.windows.lookup(name))
      except UnknownModelWindow:
        self._log_once("fallback-window:" + name, logging.WARNING,
                       "FallbackModel backup %r has no known window; packs are sized without it "
                       "(set window_overrides={%r: ...})", name, name)
    return window

  def _cache_for(self, ctx, policy: PackPolicy, counter: Optional[TokenCounter] = None, *, shared: bool = True) -> _SessionCache:
    """The key's warm cache; a fresh, unshared one when another thread compiles with it now."""
    counter = counter or self.counter
    if not shared:
      return self._new_cache(policy, counter)
    key = self._key(ctx)
    with self._guard:
      cache = self._sessions.get(key)
      if cache is None or cache.compiler.policy is not policy or cache.compiler.counter is not counter:
        cache = self._new_cache(policy, counter)
        self._sessions[key] = cache
        self._weigh(key, 0)
        while len(self._sessions) > _MAX_SESSIONS:
          self._evict_oldest()
      self._sessions.move_to_end(key)
    return cache

  def _weigh(self, key: tuple, held: int) -> None:
    """Records the bytes a cached session holds (under ``_guard``)."""
    self._cached_bytes += held - self._cache_bytes.get(key, 0)
    self._cache_bytes[key] = held

  def _evict_oldest(self) -> None:
    old, _ = self._sessions.popitem(last=False)
    self._cached_bytes -= self._cache_bytes.pop(old, 0)
    self.manifests.forget_stream(old)

  @staticmethod
  def _held(cache: _SessionCache) -> int:
    """A warm cache's memory: its compiler's estimate, plus the manifest writer's input memo
    of the same history (its items are the compiler's; its JSON holds the media again)."""
    return cache.compiler.held_bytes() + cache.compiler.media_chars

  def _fit_caches(self, ctx, cache: _SessionCache) -> None:
    """After a sync grew ``cache``: keeps the warm caches within ``session_cache_bytes``.

    The least recently used others go first. A session larger than the whole cap
    is not kept at all (this call still uses its cache): keeping it would push
    out every other session and be pushed out by the next, so all would be
    rebuilt on every call instead of that one alone.
    """
    key = self._key(ctx)
    with self._guard:
      if self._sessions.get(key) is not cache:  # an unshared (threaded), replaced or evicted cache
        if key not in self._sessions:  # evicted during this call's awaits: its write re-made the input memo
          self.manifests.forget_stream(key)
        return
      held = self._held(cache)
      if held > self.session_cache_bytes:
        del self._sessions[key]
        self._cached_bytes -= self._cache_bytes.pop(key, 0)
        self.manifests.forget_stream(key)
        oversized = True
      else:
        oversized = False
        self._weigh(key, held)
        while self._cached_bytes > self.session_cache_bytes and len(self._sessions) > 1:
          if next(iter(self._sessions)) == key:  # another call of the plugin used a cache since this one's
            self._sessions.move_to_end(key)
          self._evict_oldest()
    if oversized:
      self._log_once("cache-oversized", logging.WARNING,
                     "a session holds ~%s bytes, more than session_cache_bytes (%s): it is not kept warm and is "
                     "rebuilt from its events on every call; raise ContextPackPlugin(session_cache_bytes=...)",
                     f"{held:,}", f"{self.session_cache_bytes:,}")

  def _new_cache(self, policy: PackPolicy, counter: TokenCounter) -> _SessionCache:
    """A session's compiler, with a ranker of its own when the ranker can make one.

    A ranker keeps per-layer indexes that a compile mutates: shared by sessions
    compiling in other threads (sync ``Runner.run``), they raised mid-ranking.
    ``HybridRanker.child()`` shares only the text-analysis caches.
    """
    child = getattr(self.ranker, "child", None)
    ranker = child() if callable(child) else self.ranker
    return _SessionCache(CompilerSession(policy, counter, ranker=ranker, history_index=self._index_factory()))

  def _sync_history(self, cache: _SessionCache, history: list[types.Content],
                    result_openings: Sequence[str] = ()) -> None:
    """Append-only sync of the prior conversation; rebuilds if history was rewritten.

    ``result_openings``: how the agent's code executor's results open (see ``sources.is_code_result``).
    """
    known = cache.fps
    n = len(known)
    # An ADK compaction since the last sync rewrites the front and, with a fixed
    # retention, keeps the length; a rewind (served by another worker, say) drops
    # turns that new ones replace: either way the ends can match while the middle changed.
    rewritten, cache.rewrites = cache.events.rewrites != cache.rewrites, cache.events.rewrites
    grew = (
        not rewritten and n > 0 and len(history) >= n
        and sources.fingerprint(history[n - 1]) == known[-1]
        and sources.fingerprint(history[0]) == known[0]
        # A skill's instructions, pruned from its old load_skill response once it is unloaded.
        and all(i < n and _carries_skill_body(history[i]) for i in cache.watched)
        # A plugin before this one may edit any turn (a redaction): recall would
        # offer the stale text. ADK shares the payloads of its per-call copies, so
        # this is an identity check, with equality for payloads rebuilt equal.
        and _same_payloads(history, cache.payloads)
    )
    if not grew:
      cache.compiler.reset_history()
      cache.fps, cache.payloads, cache.spans, cache.watched = [], [], [], []
      cache.open_calls = sources.OpenCalls()
      n = 0
    watched = cache.watched + [i for i in range(n, len(history)) if _carries_skill_body(history[i])]
    new_fps = [sources.fingerprint(c) for c in history[n:]]
    if n and not new_fps:
      return
    fps = cache.fps + new_fps
    cache.payloads = cache.payloads + [_payloads(c) for c in history[n:]]
    # Re-group from the start of the last group: new contents may answer its calls.
    restart = cache.spans[-1][0] if cache.spans else 0
    keep_groups = len(cache.spans) - 1 if cache.spans else 0
    cache.compiler.truncate_history(keep_groups)
    spans = [(s + restart, e + restart) for s, e in sources.group_spans(history[restart:], result_openings)]
    items = [
        sources.group_item(history, span, cache.compiler.counter, cache.events.by_fp.get(fps[span[0]]), fps)
        for span in spans
    ]
    cache.compiler.extend_history(items)
    cache.spans = cache.spans[:keep_groups] + spans
    cache.fps = fps
    cache.watched = watched
    cache.open_calls = cache.open_calls.copy().walk(history[n:], n)

  async def _compile_into(self, ctx, llm_request, started: float, *, shared: bool = True) -> None:
    if self._fault_injector is not None:
      self._fault_injector()
    agent = ctx.agent_name
    policy = self._policy_for(agent)
    contents = list(llm_request.contents or [])
    backups = _fallback_backups(ctx, llm_request.model)  # a FallbackModel's other models may answer
    counter = self._counter_for([llm_request.model, *backups], llm_request.config)
    cache = self._cache_for(ctx, policy, counter, shared=shared)
    cache.events.update(ctx.session.events)
    # ADK's token-threshold compaction may have summarized this invocation's own
    # user turn (mid tool loop): the pack needs it, so it goes back after the summary.
    restored = sources.compacted_request_at(contents, ctx.session.events, ctx.invocation_id, ctx.user_content, cache.events)
    if restored is not None:
      contents.insert(restored, ctx.user_content)
    # The conversation proper, as positions in ``contents``: ADK's instruction
    # contents are neither history nor the user turn.
    instructions = _instruction_positions(llm_request, contents, cache.events.by_fp)
    transient = _input_context_positions(ctx, contents, cache.events.by_fp, instructions)
    placed = instructions | transient
    # PreloadMemoryTool's block is not a turn either: it is replaced below when the
    # MEMORY layer holds the same memories, else charged as input context.
    preload = await _preload_blocks(contents, cache.events.by_fp, placed)
    # A task agent's task, once the user has answered it: stated first, pinned.
    task_input = _task_input_position(ctx, contents, cache.events.by_fp, placed | set(preload))
    placed |= task_input
    convo = [i for i in range(len(contents)) if i not in placed and i not in preload]
    outside = placed | set(preload)
    anchor = sources.anchor_index([contents[i] for i in convo], ctx.user_content)
    if anchor is None:
      self._log_once("no-user-turn", logging.INFO, "request has no user turn; sent unmodified")
      return
    window = self.window or self._window_for(llm_request.model, backups)
    history = [contents[i] for i in convo[:anchor]]
    self._sync_history(cache, history, _code_result_openings(ctx))
    self._fit_caches(ctx, cache)  # weighed again after the write; this one holds if the compile fails
    state = ctx.state

    read, unread = self._read_state(state)
    plan, knowledge, step_tools = read.plan, read.knowledge, read.tools

    user = contents[convo[anchor]]
    # The pack renders the request as its text parts joined (also the ranking
    # query); every other part is costed as it is sent (see ``_payload_message``).
    said = [bool(p.text) and not p.thought for p in user.parts or ()]
    user_text = "\n".join(p.text for p, s in zip(user.parts or (), said) if s)
    other_parts = [sources.part_dict(p) for p, s in zip(user.parts or (), said) if not s]
    items: list[Item] = []
    sys_text = sources.system_text(llm_request.config)
    # Listed once for both uses: the artifact pointers and load_artifacts' listing.
    has_store = _invocation_of(ctx).artifact_service is not None
    lists_artifacts = has_store and artifact_listing.uses_load_artifacts(llm_request)
    names = await self._artifact_names(ctx, cache) if has_store and (self.include_artifacts or lists_artifacts) else []
    listing = await self._listing_edit(names) if lists_artifacts else None
    if listing is not None:  # load_artifacts lists our manifests as the user's artifacts
      sys_text = listing.system(sys_text)
      for i in sorted(instructions):
        edited = listing.content(contents[i], _LABEL_HEAD, _LABEL_TAIL)
        if edited is None:  # it held the listing alone: not sent, as without our manifests
          instructions.discard(i)
        else:
          contents[i] = edited
    system_items, system_parts, new_system = _system_items(llm_request.config, sys_text, listing, counter)
    items.extend(system_items)
    items.extend(sources.plan_items(plan))
    items.append(Item(
        id="task:user_request", layer=Layer.TASK, kind="user_request", text=user_text, trust=Trust.USER,
        pinned=True, parts=other_parts or None,
    ))
    scoped = scope_tools(llm_request, step_tools, policy.tool_scoping,
                         skill_provided_names(_invocation_of(ctx).agent) if step_tools is not None else frozenset())
    items.extend(sources.tool_items(scoped.declarations))
    evidence = sources.knowledge_items(knowledge)
    items.extend(evidence)
    if self.include_artifacts and has_store:
      keys = [k for k in names if not self._is_own_artifact(k)]
      items.extend(sources.artifact_items(keys, {e.provenance.source for e in evidence}, set()))
    source_errors: dict[str, str] = {}
    memories = await self._memories(ctx, user_text, source_errors)
    memory_hits = sources.memory_items(memories or [])
    items.extend(memory_hits)
    replaced, preload_notes = await _settle_preload(preload, memories, contents, counter)
    transient |= set(preload) - replaced
    items.extend(await self._working_notes(ctx, plan, source_errors))
    items = _dedupe_ids(items)

    inflight, positions = self._inflight_items(contents, convo, anchor, instructions, transient, task_input, counter)

    model = llm_request.model or ""
    calibration = self._session_calibration(state)
    # Sized for whichever of a FallbackModel's models answers: the largest scale.
    # A FallbackModel's backups may answer: size for the one that counts most (first on a tie).
    scaled_by = max([model, *backups], key=lambda m: calibration.scale(m, policy.calibration_margin))
    scale = calibration.scale(scaled_by, policy.calibration_margin)
    max_out = llm_request.config.max_output_tokens if llm_request.config else None
    lane = self._key(ctx)
    steps_lane = _lane_label(lane)
    lane_tail_key, lane_steps_key = tail_key(agent, steps_lane), steps_key(agent, steps_lane)
    # A lane of one tool call (a single_turn sub-agent, an AgentTool's child in its throwaway
    # session, whose state deltas ADK forwards to the caller's) ends with it: its cuts are not
    # kept in state, where every delegation's keys would pile up for the session's life.
    ic = _invocation_of(ctx)
    keep_cuts = not _one_call_lane(lane, ic.agent) and caller_invocation(ic) is ic
    # A lane that keeps cuts writes one once it trims: no key is no cut (a warm cache whose
    # cut never reached state, its call having failed, must not keep it where a cold worker can't).
    hint = self._tail_hint(cache, state.get(lane_tail_key) if keep_cuts else _MISSING)
    steps_hint = _steps_hint(cache.steps_hint, state.get(lane_steps_key), ctx.invocation_id)
    call = CallInputs(
        items=items, inflight=inflight, window=window, max_output_tokens=max_out, tail_hint=hint, inflight_hint=steps_hint,
        token_scale=round(scale, 6), now=_event_now(ctx), has_plan=plan is not None,
        problems=[f"{where} left out: {why}" for where, why in read.rejected.items()],
        meta={"invocation_id": ctx.invocation_id, "session_id": ctx.session.id, "agent": agent, "model": model,
              **({"lane": steps_lane} if steps_lane != "|" else {})},
    )
    ranker = cache.compiler.ranker
    if getattr(ranker, "embedder_error", None) is not None:
      ranker.embedder_error = None  # this call's ranking reports its own
    pack = cache.compiler.compile(call)
    span = trace.get_current_span()  # ``aether_frame.compile``, opened by ``_before_model``
    for name, layer in pack.manifest["layers"].items():
      span.set_attribute(f"aether_frame.{name}.used", layer["used"])
      span.set_attribute(f"aether_frame.{name}.budget", layer["budget"])
    span.set_attribute("aether_frame.pack_id", pack.manifest["pack_id"])

    # REWRITE: build everything first, then assign (a fault after that puts the request back:
    # ``_put_back``).
    rw = self._rewrite(pack, positions, cache, contents, convo, anchor, user, user_text, llm_request,
                       system_parts, new_system, scoped, counter, outside)
    if rw.over is not None and policy.overflow is OverflowPolicy.FAIL_LOUD:
      raise rw.over  # nothing smaller can be built: fail_loud refuses it, the ladder sends it and says so
    guard, fallback_guard, estimate, over = rw.guard, rw.fallback_guard, rw.estimate, rw.over
    llm_request.contents = rw.contents
    llm_request.config = rw.config
    scoped.apply_tools_dict(llm_request)
    self._note_allowed(ctx, scoped)
    calls = _llm_calls(ctx)
    undo = None if calls is None else _Undo(
        calls, hint,
        prior={k: state.get(k, _MISSING) for k in (lane_tail_key, LAST_PACK_KEY, lane_steps_key)},
        steps_hint=(ctx.invocation_id, steps_hint))
    # A tail from the first turn is no cut: None, as a worker that has none in state reads it,
    # so every worker compiles the same inputs.
    cut = pack.tail_start_id if pack.manifest["tail"]["start"] > 0 else None
    cache.tail_hint = cut
    cache.steps_hint = (ctx.invocation_id, pack.inflight_hint)
    steps = _with_steps_hint(state.get(lane_steps_key), ctx.invocation_id, pack.inflight_hint)
    if steps is not None and keep_cuts:  # the invocation's steps were trimmed: every worker keeps the cut
      state[lane_steps_key] = steps
      if undo is not None:
        undo.written[lane_steps_key] = steps
    payload_at = sum(1 for i in rw.sent if i < convo[anchor])
    _hold_cache_creation(llm_request, payload_at)
    before = getattr(llm_request, "cache_metadata", None)
    self._add_call(_Sent(ctx.actions, model, estimate, weakref.ref(cache), llm_request, payload_at, undo,
                         cache_before=before.model_copy() if before is not None else None,
                         limit=pack.manifest["window"] - pack.manifest["reserve"]))
    # No cut yet is no key: a lane that never trims (a workflow node's run) leaves none behind.
    keep_tail = keep_cuts and (cut is not None or state.get(lane_tail_key) is not None)
    if keep_tail:
      state[lane_tail_key] = cut
    if not pack.valid:
      self._log_once("invalid:" + _shape(";".join(pack.problems)), logging.WARNING,
                     "context pack for agent %s is invalid: %s", agent, pack.problems)

    runtime = {
        "compile_ms": round((time.perf_counter() - started) * 1000, 3),
        "request_tokens_estimate": estimate,
        "guard": {"ok": guard.ok, "problems": guard.problems, "fallback": fallback_guard is not None,
                  **({"fallback_tokens": estimate, "fallback_fits": over is None,
                      "fallback_problems": fallback_guard.problems} if fallback_guard is not None else {})},
        "calibration": calibration.snapshot(scaled_by),  # what ``token_scale`` was learned from
        "tool_scoping": scoped.describe(),
    }
    if unread:
      runtime["state_unread"] = unread
    if read.rejected:
      runtime["state_rejected"] = read.rejected
    if source_errors:  # packed without them; not a fault of the pack
      runtime["sources_failed"] = source_errors
    embedder_error = getattr(cache.compiler.ranker, "embedder_error", None)
    if isinstance(embedder_error, str):  # this call's ranking fell back to lexical
      runtime["embedder_failed"] = embedder_error
    if preload_notes:
      runtime["preload_memory"] = _preload_outcome(preload_notes, {i.id for i in memory_hits}, pack.manifest)
    if restored is not None:  # the request carries a user turn ADK's contents did not
      runtime["restored_user_turn"] = restored
    # The request is already rewritten: a failed write loses the manifest, not the pack.
    version = None
    try:
      version = await self.manifests.write(ctx, pack.manifest, runtime, compile_input=self._replay_input(cache, call),
                                           stream=self._key(ctx))
    except Exception as e:
      self._record_fault(ctx, e, "before_model", outcome="the pack was sent, its manifest was not stored")
    self._fit_caches(ctx, cache)  # after the compile and the write: what they memoised counts too
    pointer = {
        "pack_id": pack.manifest["pack_id"], "version": version, "tokens": estimate,
        "input_sha256": pack.manifest["input_sha256"], "valid": pack.valid, "invocation_id": ctx.invocation_id,
    }
    state[LAST_PACK_KEY] = pointer
    if undo is not None:
      undo.written.update({lane_tail_key: cut, LAST_PACK_KEY: pointer} if keep_tail
                          else {LAST_PACK_KEY: pointer})
    if over is not None:
      self._record_fault(ctx, over, "before_model",
                         outcome=f"the minimal safe pack was sent, {estimate - over.usable} tokens over the usable window")

  def _rewrite(self, pack: CompiledPack, positions: Mapping[str, list[int]], cache: _SessionCache,
               contents: list[types.Content], convo: list[int], anchor: int, user: types.Content, user_text: str,
               llm_request, system_parts: Optional[list[types.Part]], new_system: str, scoped: Any,
               counter: TokenCounter, outside: set[int]) -> "_Rewrite":
    """The request the pack makes, checked by the validity guard; the minimal safe pack if it fails.

    Everything kept stays in its original order, the payload in the user turn's place.
    """
    keep = {i for iid in pack.inflight_ids for i in positions[iid]}
    kept = set(keep)
    for gid in pack.conversation_ids:
      s, e = cache.compiler.history_group(gid).meta["span"]
      kept.update(convo[s:e])
    new_contents = _in_order(contents, kept, convo[anchor], _payload_message(pack.payload, user, user_text))
    new_config = llm_request.config.model_copy(deep=False)
    new_config.system_instruction = types.Content(role="user", parts=system_parts) if system_parts is not None else new_system
    new_config = scoped.apply_config(new_config)
    if pack.tool_overrides:
      new_config.tools = _override_declarations(new_config.tools, pack.tool_overrides)
    usable, pending = pack.manifest["usable"], _pending_calls(cache, contents, convo, anchor, outside)
    guard = check_request(new_contents, new_config, counter, usable=usable, pending=pending, last_role=contents[-1].role)
    if guard.ok:
      return _Rewrite(new_contents, new_config, kept, guard, None, guard.tokens, None)
    # The minimal pack: this invocation's own contents, and the pending calls and
    # confirmations (never dropped) with the user turns they open on.
    for gid in pack.pinned_ids:
      s, e = cache.compiler.history_group(gid).meta["span"]
      keep.update(convo[s:e])
    new_contents = _in_order(contents, keep, convo[anchor], _payload_message(pack.minimal_payload, user, user_text))
    self._log_once("guard:" + _shape(guard.problems[0]), logging.WARNING,
                   "context pack failed the validity guard (%s); sending the minimal safe pack", guard.problems)
    fallback_guard = check_request(new_contents, new_config, counter, usable=usable, pending=pending,
                                   last_role=contents[-1].role)
    estimate = fallback_guard.tokens
    over = None
    if estimate > usable:
      over = ContextBudgetExhausted("the minimal safe pack is over the usable window", needs={"request": estimate},
                                    usable=usable, window=pack.manifest["window"])
    return _Rewrite(new_contents, new_config, keep, guard, fallback_guard, estimate, over)

  def _read_state(self, state) -> tuple[Any, dict[str, list[str]]]:
    """The plan, knowledge and step tools in state, and the keys nothing reads; both logged once."""
    read = read_state(state, self.state_keys)
    for where, why in read.rejected.items():
      self._log_once(f"rejected:{where}:{_shape(why)}", logging.WARNING,
                     "session %s does not fit the context pack's schema and is left out of the pack: %s. "
                     "If other code writes this key for its own use (an LlmAgent output_key, say), give the "
                     "pack its own key: ContextPackPlugin(state_keys={...}) (see aether_frame.adk.state_schema)",
                     where, why)
    unread = unread_keys(state, self.state_keys)
    if unread:
      self._log_once("unread:" + repr(unread), logging.WARNING,
                     "session state has keys the context pack does not read (ignored): %s; "
                     "plan fields are %s, knowledge fields are %s", unread,
                     ", ".join(PlanState.model_fields), ", ".join(KnowledgeItem.model_fields))
    return read, unread

  def _inflight_items(self, contents: list[types.Content], convo: list[int], anchor: int, instructions: set[int],
                      transient: set[int], task_input: set[int], counter: TokenCounter,
                      ) -> tuple[list[Item], dict[str, list[int]]]:
    """The pinned contents outside the history, in request order, and the positions each stands for.

    The invocation's own steps (a long tool loop or LoopAgent run may outgrow the window, so
    complete steps may be trimmed, oldest first, once older history is gone; the latest step and
    open calls stay) and the instruction, input-context and task-input contents, charged like them.
    """
    inflight_at = convo[anchor + 1:]
    inflight_contents = [contents[i] for i in inflight_at]
    inflight_fps = [sources.fingerprint(c) for c in inflight_contents]
    pinned = [(i, self._instruction_item(n, contents[i], _placement(i, convo, anchor), counter))
              for n, i in enumerate(sorted(instructions))]
    pinned += [(i, self._instruction_item(n, contents[i], _placement(i, convo, anchor), counter, kind="input_context"))
               for n, i in enumerate(sorted(transient))]
    pinned += [(i, self._instruction_item(n, contents[i], _placement(i, convo, anchor), counter, kind="task_input"))
               for n, i in enumerate(sorted(task_input))]
    positions = {it.id: [i] for i, it in pinned}
    spans = sources.group_spans(inflight_contents)
    for n, (s, e) in enumerate(spans):
      it = sources.group_item(inflight_contents, (s, e), counter, None, inflight_fps)
      keep_step = it.pinned or n == len(spans) - 1
      it = it.model_copy(update={"id": f"inflight:{s}-{inflight_fps[s]}", "pinned": keep_step,
                                 "kind": "inflight" if keep_step else FINISHED_STEP})
      pinned.append((inflight_at[s], it))
      positions[it.id] = inflight_at[s:e]
    return [it for _, it in sorted(pinned, key=lambda x: x[0])], positions

  async def _memories(self, ctx, user_text: str, errors: dict[str, str]) -> Optional[list[Any]]:
    """The memory service's hits for the user's text (None: no service, or it failed)."""
    if _invocation_of(ctx).memory_service is None or not user_text.strip():
      return None
    found = await self._bounded(ctx.search_memory(user_text), "memory_service", errors)
    return found.memories if found is not None else None

  async def _working_notes(self, ctx, plan: Optional[PlanState], errors: dict[str, str]) -> list[Item]:
    """The working-memory notes of this session (and step), as MEMORY items."""
    if self.working_memory is None:
      return []
    s = ctx.session
    notes = await self._bounded(
        self.working_memory.list_notes(s.app_name, s.user_id, s.id, plan.step_id if plan else None),
        "working_memory", errors)
    return sources.memory_items(notes or [], kind="working")

  def _instruction_item(self, n: int, content: types.Content, placement: Optional[str], counter: TokenCounter,
                        kind: str = "instruction") -> Item:
    """The ``n``-th instruction (or input context) content as a pinned in-flight item: charged, never trimmed."""
    return Item(
        id=f"{kind}:{n}", layer=Layer.CONVERSATION, role=content.role, kind=kind,
        text=" ".join(p.text for p in content.parts or () if p.text),
        parts=[sources.part_dict(p) for p in content.parts or ()],
        tokens=sources.contents_tokens([content], counter), pinned=True, trust=Trust.DEVELOPER,
        meta={PLACEMENT: placement} if placement else {},
    )

  async def _bounded(self, pending: Awaitable[Any], source: str, errors: dict[str, str]) -> Any:
    """A memory source's answer, or None when it fails or takes over ``memory_search_timeout``.

    A memory backend that is down or slow must not stall the model call, nor
    send it unpacked (possibly over the window): the pack goes out without that
    source, and the manifest's ``runtime.sources_failed`` names it and why.
    """
    scope = asyncio.timeout(self.memory_search_timeout)
    try:
      async with scope:
        return await pending
    except Exception as e:  # the source's own errors, and our timeout
      errors[source] = (f"timed out after {self.memory_search_timeout:g} s" if scope.expired()
                        else f"{type(e).__name__}: {e}")
      self._log_once(f"source:{source}:{type(e).__name__}", logging.WARNING,
                     "%s failed (%s); packing this call without it", source, errors[source])
      return None

  async def _artifact_names(self, ctx, cache: _SessionCache) -> list[str]:
    """The session's artifact names, bounded in time.

    A slow or unreachable store (GCS retries for minutes) must not stall the
    model call: the listing times out, the last known keys are used, and the
    store is not asked again for a while.
    """
    now = time.monotonic()
    if now < cache.artifacts_retry_at:
      return cache.artifact_names
    try:
      keys = await asyncio.wait_for(ctx.list_artifacts(), timeout=self.artifact_list_timeout)
    except Exception as e:  # includes asyncio.TimeoutError
      cache.artifacts_retry_at = now + _ARTIFACT_BACKOFF_SECONDS
      self._log_once(f"artifacts:{type(e).__name__}", logging.WARNING,
                     "listing artifacts failed (%r); using the last known keys for %ss", e, _ARTIFACT_BACKOFF_SECONDS)
      return cache.artifact_names
    cache.artifact_names = list(keys)
    return cache.artifact_names

  def _is_own_artifact(self, name: str) -> bool:
    """A manifest of ours (under the writer's own file name too), not the user's artifact."""
    return name.startswith(_OWN_ARTIFACT_PREFIX) or name == self.manifests.filename

  async def _listing_edit(self, listed: Sequence[str]) -> Optional[artifact_listing.ListingEdit]:
    """How to take the manifests out of ``load_artifacts``' listing of ``listed``."""
    names = tuple(listed)
    edit = self._listings.get(names, _MISSING)
    if edit is _MISSING:
      edit = await artifact_listing.listing_edit(names, self._is_own_artifact)
      with self._guard:
        self._listings[names] = edit
        while len(self._listings) > 64:
          self._listings.popitem(last=False)
    return edit

  def _replay_input(self, cache: _SessionCache, call: CallInputs):
    """The replayable input, built lazily by writers that store it."""
    def build():
      from ..core.compiler import CompileInput
      return CompileInput(policy=cache.compiler.policy, history=list(cache.compiler.history), call=call)
    return build

  # ------------------------------------------------------------------- faults
  def _record_fault(self, ctx, error: Exception, callback: str, outcome: Optional[str] = None) -> None:
    """Records every fault in session state (and on the call's span); logs each kind by type and
    where it was raised (``_log_once``: now, then every 10 minutes while it recurs).

    Not by message: messages carry counts that change every call, and a
    fault that repeats on every call would log a traceback on every call.
    ``outcome``: what happened to the call, when not the callback's default.
    """
    self.faults += 1
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    if outcome is None:
      outcome = "request sent unmodified" if callback == "before_model" else "response not used for calibration"
    # Each unknown model is named once (its message has no counts in it).
    which = f":{error}" if isinstance(error, UnknownModelWindow) else ""
    agent, session, invocation = _whose(ctx)
    self._log_once(f"fault:{callback}:{type(error).__qualname__}:{where}{which}", logging.ERROR,
                   "aether-frame fault in %s_callback (agent %s, session %s, invocation %s); %s: %r",
                   callback, agent, session, invocation, outcome, error,
                   # A model with no known window is a configuration to fix, not a bug to trace.
                   exc_info=None if isinstance(error, UnknownModelWindow) else error)
    try:
      earlier = ctx.state.get(LAST_FAULT_KEY)
      count = earlier.get("count") if isinstance(earlier, dict) else None
      ctx.state[LAST_FAULT_KEY] = {
          "error": type(error).__name__, "message": str(error)[:500],
          "count": (count if isinstance(count, int) and not isinstance(count, bool) else 0) + 1,
          "outcome": outcome, "callback": callback, "agent": ctx.agent_name, "invocation_id": ctx.invocation_id,
          "at": round(time.time(), 3), "raised_at": _short_location(where),
      }
    except Exception:  # the state itself may be what failed
      pass
    if callback == "before_model":  # inside the call's ``aether_frame.compile`` span
      _span_fault(trace.get_current_span(), error, outcome)

  def _log_once(self, key: str, level: int, msg: str, *args, exc_info=None) -> None:
    """Logs ``key``'s message now, then at most every 10 minutes while it recurs
    (``log_limit``): a condition met on every call neither floods the log nor goes quiet for good."""
    self._logged.log(key, level, msg, *args, exc_info=exc_info)


def _whose(ctx) -> tuple[str, str, str]:
  """(agent, session id, invocation id) of a callback or invocation context, printable in one log line."""
  def read(get: Callable[[], Any]) -> str:
    try:
      return shown(get())
    except Exception:  # a fault report must not fault
      return "?"

  agent = read(lambda: ctx.agent_name) if hasattr(ctx, "agent_name") else read(lambda: ctx.agent.name)
  return agent, read(lambda: ctx.session.id), read(lambda: ctx.invocation_id)


def _short_location(where: str) -> str:
  """``file:line`` from the package on (``aether_frame/core/compiler.py:512``), else as it is."""
  at = where.replace("\\", "/").rfind("/aether_frame/")
  return where[at + 1:] if at >= 0 else where


def _span_fault(span: Any, error: Exception, outcome: str) -> None:
  span.record_exception(error)
  span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {outcome}"))
  span.set_attribute("aether_frame.fault", type(error).__name__)
  span.set_attribute("aether_frame.outcome", outcome)


def _task_input_position(ctx, contents: list[types.Content], event_fps: Mapping[str, Any], taken: set[int]) -> set[int]:
  """ADK's task input, when it is no longer the user turn: an agent in ``mode="task"``
  runs under an isolation scope, and its first content is the delegating call's
  arguments as a user message, never a session event (``ctx.user_content`` is
  that message too). Once the user has replied, the latest reply is the request
  and the task stays first, pinned: as the anchor it made every later turn an
  in-flight step, never trimmed, until the request overflowed the window.
  """
  if not isinstance(getattr(ctx, "isolation_scope", None), str):
    return set()
  first = next((i for i in range(len(contents)) if i not in taken), None)
  if first is None or not sources.is_human_user(contents[first]) or sources.fingerprint(contents[first]) in event_fps:
    return set()
  # The latest human turn after it, searched from the end (it is usually the last content).
  replied = any(sources.is_human_user(contents[i]) and not sources.is_other_agent_context(contents[i])
                for i in range(len(contents) - 1, first, -1) if i not in taken)
  return {first} if replied else set()


async def _preload_blocks(contents: list[types.Content], event_fps: Mapping[str, Any], taken: set[int]) -> dict[int, str]:
  """Positions (and texts) of ``PreloadMemoryTool`` blocks: framed as ADK frames them, never session events."""
  shape = await preload_memory.frame()
  if shape is None:
    return {}
  # ADK inserts it among the user-role contents that end the request (before the
  # user turn, or after a tool result) or, with a static instruction's files,
  # among those that start it: only those runs are read, not the whole history.
  n = len(contents)
  head = next((i for i in range(n) if contents[i].role != "user"), n)
  tail = next((i for i in range(n - 1, -1, -1) if contents[i].role != "user"), -1) + 1
  out = {}
  for i in [*range(head), *range(max(head, tail), n)]:
    if i not in taken:
      text = preload_memory.block_text(contents[i], shape)
      if text is not None and sources.fingerprint(contents[i]) not in event_fps:
        out[i] = text
  return out


async def _settle_preload(preload: dict[int, str], memories: Optional[Sequence[Any]], contents: list[types.Content],
                          counter: TokenCounter) -> tuple[set[int], list[dict[str, Any]]]:
  """The blocks the MEMORY layer replaces (those that are exactly what its hits make), and the manifest's notes."""
  if not preload:
    return set(), []
  expected = await preload_memory.render_block(memories) if memories else None
  replaced: set[int] = set()
  notes = []
  for i in sorted(preload):
    same = expected is not None and preload[i] == expected
    if same:
      replaced.add(i)
    notes.append({
        "tokens": sources.contents_tokens([contents[i]], counter),
        "status": "replaced by the memory layer" if same
        else "kept as input context (its memories differ from the memory layer's)",
    })
  return replaced, notes


def _preload_outcome(notes: list[dict[str, Any]], memory_ids: set[str], manifest: dict[str, Any]) -> list[dict[str, Any]]:
  """Says, for a replaced block, how many of its hits the pack carries: the MEMORY
  layer keeps its top-K within budget, and names the others in the manifest."""
  rows = [r for r in manifest.get("items", ()) if r.get("id") in memory_ids]
  included = sum(1 for r in rows if r.get("status") == "included")
  return [{**n, "hits": len(memory_ids), "included": included} if n["status"].startswith("replaced") else n
          for n in notes]


def _input_context_positions(ctx, contents: list[types.Content], event_fps: Mapping[str, Any], taken: set[int]) -> set[int]:
  """Positions of ``RunConfig.model_input_context``: contents ADK inserts before the
  user turn for this invocation only, never stored as session events.

  As history they would be trimmable, and, gone by the next turn, would reset
  the incremental history sync on every turn (a full re-cost of the session).
  """
  run_config = getattr(_invocation_of(ctx), "run_config", None)
  extra = list(getattr(run_config, "model_input_context", None) or ())
  if not extra:
    return set()
  wanted: dict[str, int] = {}
  for c in extra:
    fp = sources.fingerprint(c)
    wanted[fp] = wanted.get(fp, 0) + 1
  out: set[int] = set()
  left = len(extra)
  for i in range(len(contents) - 1, -1, -1):  # ADK puts them just before the user turn
    if i in taken:
      continue
    fp = sources.fingerprint(contents[i])
    if wanted.get(fp) and fp not in event_fps:
      wanted[fp] -= 1
      out.add(i)
      left -= 1
      if not left:
        break
  return out


def _placement(i: int, convo: list[int], anchor: int) -> Optional[str]:
  """Where the request carries the instruction content at ``i``, for the manifest's
  prefix hash and the audit's request rendering: ahead of every conversation
  content, ahead of the user turn, or (``None``) among the in-flight steps."""
  if not convo or i < convo[0]:
    return PLACED_FIRST
  return PLACED_BEFORE_REQUEST if i < convo[anchor] else None


def _keep_cache_chain(sent: _Sent, llm_response) -> None:
  """Keeps ADK's context-cache fingerprint chain on contents that persist.

  On a tool step ADK's Gemini cache manager fingerprints every content before
  the trailing function response, the payload included. The payload lives for
  one invocation (the next sends the user's own turn there), so a session event
  carrying that fingerprint never matches again and the cache is created a call
  late. A fingerprint-only record reaching past the payload is replaced by the
  prefix fingerprint the request came with, when that stops short of it. An
  active cache's record is left alone: ADK must see it to use or delete it.
  """
  meta = getattr(llm_response, "cache_metadata", None)
  if meta is None or meta.cache_name is not None or sent.payload_at is None or meta.contents_count <= sent.payload_at:
    return
  before = sent.cache_before
  if before is not None and before.contents_count <= sent.payload_at:
    llm_response.cache_metadata = type(before)(fingerprint=before.fingerprint, contents_count=before.contents_count)


def _hold_cache_creation(llm_request, payload_at: int) -> None:
  """No Gemini context cache is created on a step whose cacheable prefix holds the payload.

  On a tool step ADK caches every content before the trailing function
  response: such a cache holds the payload, misses from the next invocation
  on, and is deleted there, so every tool-calling turn would create a cache
  and run its first call uncached. Without a previous prompt size ADK's Gemini
  manager creates none; a size under ``min_tokens`` already stops it, and is
  kept for the prefix-marking models (Claude), which read it as a gate.
  """
  config, tokens = getattr(llm_request, "cache_config", None), getattr(llm_request, "cacheable_contents_token_count", None)
  if config is None or tokens is None or tokens < config.min_tokens:
    return
  contents = llm_request.contents
  start = len(contents)  # where ADK's cacheable prefix ends: before the trailing run of user contents
  while start > 0 and contents[start - 1].role == "user":
    start -= 1
  if start > payload_at:
    llm_request.cacheable_contents_token_count = None


def _over_call_limit(ctx) -> bool:
  """Whether ADK refuses this call for ``RunConfig.max_llm_calls``.

  ADK counts the call after the before-model callbacks and then raises: a
  pack compiled for it is never sent, yet its manifest, tail hint and
  estimate would stay behind as if it had been.
  """
  try:
    ic = _invocation_of(ctx)
    limit = ic.run_config.max_llm_calls
    made = ic._invocation_cost_manager._number_of_llm_calls
  except Exception:  # an ADK that counts otherwise: the call is packed
    return False
  return isinstance(limit, int) and isinstance(made, int) and 0 < limit <= made


def _one_call_lane(key: tuple, agent: Any) -> bool:
  """Whether compiler key ``key`` is a lane ADK opened for one tool call, which ends with it: a
  ``single_turn`` sub-agent or an agent run as a tool gets the branch ``<parent>.<tool>@<function
  call id>``, new per call. Workflow runs number theirs (``writer@2``), stable across turns, and a
  ``task`` sub-agent keeps its call-named branch across the user's replies until it is done."""
  branch = key[4]
  if not isinstance(branch, str) or getattr(agent, "mode", None) == "task":
    return False
  name, at, run = branch.rpartition(".")[2].rpartition("@")
  return bool(name and at and run) and not run.isdigit()


def _lane_label(key: tuple) -> str:
  """A compiler key's branch and node path: parallel runs of one agent cut their own steps."""
  return f"{key[4] or ''}|{key[5] or ''}"


def _steps_hint(cached: tuple[Optional[str], Optional[str]], stored: Any, invocation_id: str) -> Optional[str]:
  """This invocation's in-flight cut for the lane whose state value is ``stored``: that
  one when it differs from the cut this cache last made (another worker resumed the
  invocation and moved it, or this one's cache was evicted), else this cache's. Anyone
  can write state: a value that does not read is ignored, and the compiler ignores an
  id that is not among the call's steps."""
  mine = cached[1] if cached[0] == invocation_id else None
  value = stored.get("cut") if isinstance(stored, Mapping) and stored.get("invocation") == invocation_id else None
  if isinstance(value, str) and value != mine:
    return value
  return mine


def _with_steps_hint(stored: Any, invocation_id: str, hint: Optional[str]) -> Optional[dict[str, Any]]:
  """The lane's state value recording ``hint`` (None: nothing to write); a new invocation
  replaces the last one's cut."""
  if hint is None:
    return None
  if isinstance(stored, Mapping) and stored.get("invocation") == invocation_id and stored.get("cut") == hint:
    return None
  return {"invocation": invocation_id, "cut": hint}


def _payloads(content: types.Content) -> tuple:
  """A content's parts by their payloads, in order: the objects ADK's per-call copies share
  with the session (a call's args, a result's response, media bytes), so that equal turns
  compare by identity. A payload edited in place is shared too, and goes unseen."""
  return tuple([_payload(p) for p in content.parts or ()])


def _pending_calls(cache: _SessionCache, contents: list[types.Content], convo: list[int], anchor: int,
                   outside: set[int]) -> frozenset[str]:
  """``pending_calls(contents)``, from the synced history's open calls: only the contents after
  the history are walked (and those outside it that come before its end, which hold no calls).

  The history's calls were paired when it was synced; its contents are this call's (same
  payloads, see ``_sync_history``). Anything else: the whole request is walked.
  """
  if anchor == 0 or anchor != len(cache.fps):
    return pending_calls(contents)
  last = convo[anchor - 1]
  for i in outside:
    if i < last and sources.call_ids(contents[i]) != ([], []):
      return pending_calls(contents)
  ledger = cache.open_calls.copy(convo)
  return pending_labels(ledger.walk(contents[last + 1:], last + 1))


def _same_payloads(history: Sequence[types.Content], known: list[tuple]) -> bool:
  """``[_payloads(c) for c in history[:len(known)]] == known``, without building the list.

  The one O(history) step of a warm sync (ADK rebuilds every content each call, so every
  one is looked at): no tuple or list is made per content, and it stops at the first
  difference. Compares as the list did: identity first, then equality. Needs
  ``len(history) >= len(known)``.
  """
  for c, want in zip(history, known):
    parts = c.parts or ()
    if len(parts) != len(want):
      return False
    for p, w in zip(parts, want):
      got = p.text
      if got is None:
        got = _payload(p)
      if got is not w and not got == w:
        return False
  return True


def _payload(p: types.Part) -> Any:
  if p.text is not None:
    return p.text
  # ADK rebuilds a call each request (args shared), with its id or without it (per model) alike on
  # every call: an id that changes anyway (the agent's model changed) re-syncs, as the pending-call
  # ledger kept with the synced history pairs by id.
  if p.function_call is not None:
    return (p.function_call.name, p.function_call.args, p.function_call.id)
  if p.function_response is not None:
    return (p.function_response.name, p.function_response.response, p.function_response.parts, p.function_response.id)
  if p.inline_data is not None:
    return (p.inline_data.mime_type, p.inline_data.data)
  return p.file_data or p.executable_code or p.code_execution_result or p.thought_signature


def _invocation_of(ctx) -> Any:
  """The invocation context a callback or tool context wraps, itself: the model call
  and its tools share it, while ``get_invocation_context()`` returns a new copy."""
  ic = getattr(ctx, "_invocation_context", None)
  return ic if ic is not None else ctx.get_invocation_context()


def _llm_calls(ctx) -> Optional[tuple[Any, int]]:
  """The invocation's model-call counter and its count now (see ``_Undo``)."""
  try:
    counter = _invocation_of(ctx)._invocation_cost_manager
    made = counter._number_of_llm_calls
  except Exception:  # an ADK that counts otherwise: an unsent pack is not taken back
    return None
  return (counter, made) if isinstance(made, int) else None


def _code_result_openings(ctx) -> tuple[str, ...]:
  """How the agent's code executor opens a result: ADK sends each as a user text with it."""
  try:
    executor = getattr(_invocation_of(ctx).agent, "code_executor", None)
    opening = executor.execution_result_delimiters[0] if executor is not None else None
  except Exception:  # an executor of another shape: results are grouped as turns
    return ()
  return (opening,) if isinstance(opening, str) and opening else ()


def _packed_by_agent(ctx) -> bool:
  """Whether the agent's own before-model callbacks include ``context_pack_callbacks``."""
  try:
    agent = _invocation_of(ctx).agent
    callbacks = getattr(agent, "canonical_before_model_callbacks", None) or ()
    return any(isinstance(getattr(cb, "plugin", None), ContextPackPlugin) for cb in callbacks)
  except Exception:  # fail-open: an agent of another shape is packed by the plugin
    return False


_REQUEST_EDITING_ADK_PLUGINS = frozenset({
    "GlobalInstructionPlugin", "MultimodalToolResultsPlugin", "ContextFilterPlugin", "ForceEscalationPlugin",
})
"""ADK's own plugins that change the request in ``before_model_callback`` (its
logging and analytics plugins only read it). ``ForceEscalationPlugin`` forces a
call to its consult tool through ``tool_config``: after the pack, a mask that
leaves that tool out refuses the forced call. ``ReflectAndRetryModelPlugin``
only adds an undeclared tool to ``tools_dict``, which no mask refuses."""


def _not_a_policy(value: Any) -> str:
  """What was given instead of a PackPolicy; a preset's name gets the call that makes it."""
  if isinstance(value, str):
    return f"str {value!r}" + (f" (a preset: PackPolicy.preset({value!r}))" if value in PRESETS else "")
  if isinstance(value, Mapping):
    return f"{type(value).__name__} (fields: PackPolicy(**...) or PackPolicy.model_validate(...))"
  return type(value).__name__


def _plugins_after(plugin: BasePlugin, ctx) -> list[str]:
  """Names of the plugins ADK runs after ``plugin`` that may change the request.

  ADK runs plugins in list order: a system instruction, parts or a trim added
  after the pack is built are outside its budget (and may split its tail).
  """
  try:
    plugins = list(_invocation_of(ctx).plugin_manager.plugins)
    later = plugins[plugins.index(plugin) + 1:]
  except Exception:  # not run by a plugin manager (agent-level callbacks)
    return []
  out = []
  for p in later:
    cls = type(p)
    if isinstance(p, ContextPackPlugin):  # a second one leaves packed requests alone (``_PACKED``)
      continue
    if cls.__name__ in _REQUEST_EDITING_ADK_PLUGINS or (
        not cls.__module__.startswith("google.adk.")
        and getattr(cls, "before_model_callback", None) is not BasePlugin.before_model_callback):
      out.append(p.name)
  return out


def _fallback_backups(ctx, model: Optional[str]) -> list[str]:
  """The backup model names of the agent's ``FallbackModel``, when the request names its primary."""
  try:
    llm = getattr(_invocation_of(ctx).agent, "canonical_model", None)
  except Exception:  # an agent of another shape, or a model name ADK cannot resolve
    return []
  if _FallbackModel is None or not isinstance(llm, _FallbackModel) or not model or llm.model != model:
    return []
  names = [e if isinstance(e, str) else getattr(e, "model", "") for e in llm.models[1:]]
  return [n for n in names if n]


def _is_live(ctx) -> bool:
  """Whether the call belongs to a live (bidi) session, or a run ADK routes through one (``support_cfc``)."""
  try:
    ic = _invocation_of(ctx)
    return ic.live_request_queue is not None or getattr(ic.run_config, "support_cfc", False) is True
  except Exception:  # a context of another shape: packed as usual
    return False


def _server_keeps_history(ctx, llm_request) -> bool:
  """Whether the model keeps the conversation itself (Gemini's stateful Interactions API)."""
  if getattr(llm_request, "previous_interaction_id", None):
    return True
  try:
    model = getattr(_invocation_of(ctx).agent, "canonical_model", None)
    return getattr(model, "use_interactions_api", False) is True
  except Exception:  # an agent of another shape, or a model name ADK cannot resolve: packed as usual
    return False


def _shape(text: str) -> str:
  """``text`` without its numbers, as a log-once key: counts change every call."""
  return re.sub(r"\d+", "#", text)


def _instruction_positions(llm_request, contents: list[types.Content], event_fps: Mapping[str, Any]) -> set[int]:
  """Positions of the contents ADK added for the agent's instructions.

  A static instruction's files ride as user contents that its system
  instruction refers to by name; ADK puts them first, with the dynamic
  instruction after them, and records where that prefix ends (kept stable for
  provider caching). Without files, the dynamic instruction rides alone,
  labelled with ADK's instruction markers, before the user turn or after a
  tool result. The prefix is trusted while it still has that shape (a plugin
  ahead of this one may have moved contents); a labelled content that is a
  session event is conversation (a user can type a label).
  """
  out: set[int] = set()
  end = getattr(llm_request, "_static_instruction_prefix_end_index", None)
  if (getattr(llm_request, "_has_static_instruction", False) and isinstance(end, int) and 0 < end <= len(contents)
      and all(_is_labelled_instruction(c) or _is_instruction_file(c) for c in contents[:end])):
    out.update(range(end))
  for i, c in enumerate(contents):
    if i not in out and _is_labelled_instruction(c) and sources.fingerprint(c) not in event_fps:
      out.add(i)
  return out


def _carries_skill_body(content: types.Content) -> bool:
  """A ``load_skill`` response that still holds the skill's instructions.

  ``SkillToolset`` with its skill lifecycle on replaces such a response, in
  every later request, with a short notice once the skill is unloaded. The sync
  compares only the history's ends, so these positions are checked too (a key
  test, not a hash of the whole SKILL.md), or the old rules would live on in
  recall. A rewritten response no longer qualifies, so it is checked no more.
  """
  for p in content.parts or ():
    r = p.function_response
    if r is not None and (r.name == "load_skill" or (r.name or "").endswith("_load_skill")):
      if isinstance(r.response, dict) and "instructions" in r.response:
        return True
  return False


def _is_labelled_instruction(content: types.Content) -> bool:
  """ADK's ``_label_dynamic_instruction`` shape: one text part, preamble and markers."""
  if _LABEL_HEAD is None or content.role != "user" or len(content.parts or ()) != 1:
    return False
  text = content.parts[0].text
  return isinstance(text, str) and text.startswith(_LABEL_HEAD) and text.endswith(_LABEL_TAIL)


def _is_instruction_file(content: types.Content) -> bool:
  """What ``LlmRequest.append_instructions`` makes of a file: a user content with a file part."""
  parts = content.parts or ()
  return (content.role == "user" and any(p.inline_data or p.file_data for p in parts)
          and not any(p.function_call or p.function_response for p in parts))


def _is_plain_text(part: types.Part) -> bool:
  return bool(part.text) and sources.part_dict(part).keys() == {"text"}


def _system_items(config, sys_text: str, listing: Optional[artifact_listing.ListingEdit],
                  counter: TokenCounter) -> tuple[list[Item], Optional[list[types.Part]], str]:
  """The SYSTEM layer (the instruction with the interpretation contract, its media, the response
  schema), the instruction as parts when it holds media (else None), and its text."""
  items: list[Item] = []
  system_media = sources.system_media(config)
  system_parts: Optional[list[types.Part]] = None
  if system_media:  # sent as parts, in the order given; the item holds their texts as the guard reads them
    system_parts = _system_parts(sources.system_parts(config), listing)
    new_system = "\n".join(p.text for p in system_parts if p.text)
  else:
    new_system = sys_text if INTERPRETATION_CONTRACT in sys_text else (sys_text + "\n\n" + INTERPRETATION_CONTRACT).strip()
  items.append(Item(id="system:instruction", layer=Layer.SYSTEM, text=new_system, trust=Trust.SYSTEM, pinned=True))
  if system_parts is not None:  # kept with the instruction, and charged to the system layer
    media_dicts = [sources.part_dict(p) for p in system_media]
    items.append(Item(id="system:instruction_media", layer=Layer.SYSTEM, text="", parts=media_dicts,
                      tokens=count_parts(media_dicts, counter), trust=Trust.SYSTEM, pinned=True,
                      meta=_media_positions(system_parts)))
  schema = sources.response_schema_text(config)
  if schema:  # output_schema: sent with the request and counted toward the prompt
    items.append(Item(id="system:response_schema", layer=Layer.SYSTEM, text=schema, trust=Trust.SYSTEM, pinned=True))
  return items, system_parts, new_system


def _system_parts(parts: list[types.Part], listing: Optional[artifact_listing.ListingEdit]) -> list[types.Part]:
  """A system instruction with files, as sent: the parts in their order, the contract joined to the last text.

  Joined there (once, the same on every call) as a string instruction gets it,
  so ``[text, file, text]`` stays in that order and its cached prefix holds;
  with no text at all the contract leads, as before.
  """
  if listing is not None:  # a text that held the artifact listing alone goes, as ADK would not have sent it
    parts = [types.Part(text=listing.system(p.text)) if p.text else p for p in parts]
    parts = [p for p in parts if p.text or p.text is None]
  merged: list[types.Part] = []
  for p in parts:  # adjacent texts as one, joined as ``system_text`` joins them (files after texts: as before)
    if p.text and merged and merged[-1].text:
      merged[-1] = types.Part(text=merged[-1].text + "\n" + p.text)
    else:
      merged.append(p)
  parts = merged
  if INTERPRETATION_CONTRACT in "\n".join(p.text for p in parts if p.text):
    return parts
  last = max((n for n, p in enumerate(parts) if p.text), default=None)
  if last is None:
    return [types.Part(text=INTERPRETATION_CONTRACT), *parts]
  joined = types.Part(text=(parts[last].text + "\n\n" + INTERPRETATION_CONTRACT).strip())
  return [*parts[:last], joined, *parts[last + 1:]]


def _media_positions(parts: list[types.Part]) -> dict[str, Any]:
  """Meta of the instruction's file item: where its files sit and how long each text run
  is, when a text follows a file.

  ``prefix_sha256`` digests the item (the texts joined, and this), so whatever
  changes the parts sent changes it, as it breaks the provider's cache. Empty for
  files after every text (the only layout sent before), so those hashes hold.
  """
  at = [n for n, p in enumerate(parts) if p.text is None]
  if not at or not any(p.text for p in parts[at[0]:]):
    return {}
  return {"positions": at, "runs": [len(p.text) for p in parts if p.text]}


def _payload_message(pack_text: str, user: types.Content, user_text: str) -> types.Content:
  """The pack, then the user's parts unchanged and in order.

  The pack was rendered (and costed) ending in the request as its text parts
  joined by newlines; that copy is cut off and the user's own parts follow,
  so a caption stays next to its image and every part keeps its fields. A
  leading plain text part is joined back onto the pack part: the common
  one-text message is then sent exactly as rendered, and the pack text is the
  same on every step of the invocation.
  """
  if not pack_text.endswith(user_text):
    raise ValueError("the rendered pack does not end with the user's request")
  head = pack_text[:len(pack_text) - len(user_text)]
  parts = list(user.parts or ())
  if parts and _is_plain_text(parts[0]):
    return types.Content(role=user.role, parts=[types.Part(text=head + parts[0].text), *parts[1:]])
  return types.Content(role=user.role, parts=[types.Part(text=head), *parts])


def _in_order(contents: list[types.Content], keep: set[int], at: int, payload: types.Content) -> list[types.Content]:
  """``contents`` at the positions in ``keep``, in order, with ``payload`` at ``at``."""
  return [payload if i == at else c for i, c in enumerate(contents) if i == at or i in keep]


def _override_declarations(tools, overrides: Mapping[str, str]):
  """A new tools list with trimmed declarations; the request's own list is not mutated."""
  out = []
  for tool in tools or ():
    if isinstance(tool, types.Tool) and tool.function_declarations:
      decls = [
          types.FunctionDeclaration.model_validate_json(overrides[d.name]) if d.name in overrides else d
          for d in tool.function_declarations
      ]
      tool = tool.model_copy(update={"function_declarations": decls})
    out.append(tool)
  return out


def _dedupe_ids(items: list[Item]) -> list[Item]:
  """Memory services may return the same entry twice: keep the first.

  Two different entries under one id (a memory service or knowledge list that
  reuses ids) are both kept: the later one's id gains a digest of its text, so
  it is ranked, sent or dropped on the record like any other item.
  """
  seen: dict[str, Item] = {}
  out = []
  for it in items:
    first = seen.get(it.id)
    if first is not None:
      if first.text == it.text and first.layer is it.layer:
        continue
      base = f"{it.id}~{hashlib.blake2b(it.text.encode('utf-8', 'surrogatepass'), digest_size=4).hexdigest()}"
      uid, n = base, 1
      while uid in seen:
        n += 1
        uid = f"{base}.{n}"
      it = it.model_copy(update={"id": uid})
    seen[it.id] = it
    out.append(it)
  return out


def _event_now(ctx) -> Optional[float]:
  events = ctx.session.events
  return sources.event_time(events[-1].timestamp) if events else None


def context_pack_callbacks(**plugin_kwargs) -> tuple[Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]]:
  """Agent-level callbacks for a per-agent policy.

  Returns ``(before_model_callback, after_model_callback)`` for
  ``LlmAgent(before_model_callback=..., after_model_callback=...)``. Next to
  an app-wide ``ContextPackPlugin`` they win: the plugin leaves that agent to
  them, so its requests are packed once, under this policy.
  """
  plugin = ContextPackPlugin(**plugin_kwargs)

  async def before_model(callback_context, llm_request):
    return await plugin._before_model(callback_context, llm_request)  # the agent's own: no deferral check

  async def after_model(callback_context, llm_response):
    return await plugin.after_model_callback(callback_context=callback_context, llm_response=llm_response)

  before_model.plugin = plugin  # type: ignore[attr-defined]
  after_model.plugin = plugin  # type: ignore[attr-defined]
  return before_model, after_model


def make_before_model_callback(**plugin_kwargs) -> Callable[..., Awaitable[Any]]:
  """Just the ``before_model_callback`` (no calibration loop)."""
  return context_pack_callbacks(**plugin_kwargs)[0]
