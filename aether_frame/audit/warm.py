"""Warm compiler sessions for rebuilding the calls of one stored session in order.

Each call's stored history holds the one before it. Compiling every call from
scratch (``compile_pack``) re-digests and re-indexes the whole history per
call, so replaying or reporting a session took time quadratic in its length
(400 calls: most of 17 s). Here each call extends the compiler session that
rebuilt the previous call of the same agent, as the plugin's own session did
when it packed them: only the new groups are costed, digested and indexed.

A warm session compiles byte-identically to a cold one (the compiler's
property tests hold it to that), so this changes how long a rebuild takes,
not what it produces. ``cold=True`` keeps the stateless path, for checking
exactly that on real sessions.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Sequence

from ..core.compiler import CompiledPack, CompileInput, CompilerSession, compile_pack
from ..core.costing import TokenCounter

MAX_WARM = 8
"""Warm sessions kept (least recently used let go): one per agent, lane, policy and tokenizer."""


@dataclass
class _Warm:
  session: CompilerSession
  keys: list[str] = field(default_factory=list)
  """The blob key of each history group the session holds, oldest first."""


class SessionRebuilds:
  """What rebuilding the calls of one stored session shares: the ranker, the items already
  decoded, and a warm compiler session per stream of calls."""

  def __init__(self, ranker: Any, make_index: Callable[[], Any], *, cold: bool = False):
    self._ranker = ranker
    self._make_index = make_index
    self.cold = cold
    self.memo: dict[str, Any] = {}
    """Decoded items by blob key (see ``inputs.decode``)."""
    self._warm: OrderedDict[Hashable, _Warm] = OrderedDict()
    self.groups_added = 0
    """History groups handed to a compiler session so far (cold: every call's whole history)."""

  def next_session(self) -> "SessionRebuilds":
    """For another stored session: the same ranker (what it analysed carries over), nothing else."""
    return SessionRebuilds(self._ranker, self._make_index, cold=self.cold)

  def compile(self, inputs: CompileInput, history_keys: Sequence[str], counter: TokenCounter,
              stream: Hashable) -> CompiledPack:
    """``inputs`` compiled; ``history_keys`` names its history groups (one content key each),
    ``stream`` the calls that share a compiler session (agent and lane, policy, tokenizer)."""
    if len(history_keys) != len(inputs.history):
      raise ValueError(f"{len(history_keys)} history keys for {len(inputs.history)} history groups")
    if self.cold:
      self.groups_added += len(inputs.history)
      return compile_pack(inputs, counter, ranker=self._ranker, history_index=self._make_index())
    warm = self._warm.pop(stream, None)
    if warm is None:
      child = getattr(self._ranker, "child", None)
      ranker = child() if callable(child) else self._ranker
      warm = _Warm(CompilerSession(inputs.policy, counter, ranker=ranker, history_index=self._make_index()))
    # Taken out until the call compiles: one that fails may leave the session half-way,
    # and the stream's next call then starts afresh.
    n = _common_prefix(warm.keys, history_keys)
    warm.session.truncate_history(n)
    del warm.keys[n:]
    fresh = inputs.history[n:]
    warm.session.extend_history(fresh)
    self.groups_added += len(fresh)
    warm.keys.extend(history_keys[n:])
    pack = warm.session.compile(inputs.call)
    self._warm[stream] = warm
    while len(self._warm) > MAX_WARM:
      self._warm.popitem(last=False)
    return pack


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
  """Length of the longest common prefix of ``a`` and ``b``."""
  n = min(len(a), len(b))
  if a[:n] == b[:n]:  # the usual case: the history only grew
    return n
  return next(i for i in range(n) if a[i] != b[i])
