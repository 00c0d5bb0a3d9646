"""Keeps the plugin's own manifests out of ADK's ``load_artifacts`` listing.

ADK's ``load_artifacts`` tool tells the model every artifact of the session
("You have a list of artifacts: [...] ... Always call load_artifacts before
answering questions related to the artifacts"), and the plugin's manifests
are artifacts of the session. A model then loads them: a few KB of pack ids
and hashes read as the user's data, charged to the budget. The listing is
rebuilt here with ADK's own tool, so the text removed is exactly the text ADK
wrote; when no artifact of the user's is left, the listing goes, as ADK
would not have written one.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Optional, Sequence

from google.genai import types

logger = logging.getLogger(__name__)

_JOINER = "\n\n"
"""How ADK joins dynamic instructions, and appends them to the system instruction."""


class _Lister:
  """The part of a ``ToolContext`` the tool's listing reads."""

  def __init__(self, names: Sequence[str]):
    self._names = list(names)

  async def list_artifacts(self) -> list[str]:
    return list(self._names)


async def listing_text(names: Sequence[str]) -> Optional[str]:
  """The instruction ADK's ``load_artifacts`` adds for ``names`` (None: none, or an ADK without it)."""
  try:
    from google.adk.models.llm_request import LlmRequest
    from google.adk.tools.load_artifacts_tool import load_artifacts_tool

    request = LlmRequest()
    await load_artifacts_tool._append_artifacts_to_llm_request(tool_context=_Lister(names), llm_request=request)
    added = list(request._dynamic_instructions)
  except Exception as e:  # an ADK whose tool works otherwise: the listing is left as it is
    logger.debug("aether-frame: cannot rebuild ADK's artifact listing (%r)", e)
    return None
  return added[0] if len(added) == 1 and isinstance(added[0], str) else None


class ListingEdit:
  """Replaces ADK's listing of ``names`` by the listing of ``kept`` (or removes it) in request texts."""

  def __init__(self, names: Sequence[str], full: str, reduced: Optional[str]):
    self.full = full
    self.reduced = reduced
    self._listed = json.dumps(list(names))
    """The list as ADK writes it into the listing."""

  def system(self, text: str) -> str:
    """The system instruction without the plugin's names; unchanged if the listing is not in it."""
    if self.full not in text:
      return text
    if self.reduced is not None:
      return text.replace(self.full, self.reduced, 1)
    for piece in (_JOINER + self.full, self.full + _JOINER, self.full):
      if piece in text:
        return text.replace(piece, "", 1)
    return text

  def content(self, content: types.Content, head: Optional[str], tail: Optional[str]) -> Optional[types.Content]:
    """An instruction content without the plugin's names; None when the listing was all it held.

    ADK's routed dynamic instructions ride as one labelled text (``head`` +
    the instructions joined + ``tail``): the listing goes from inside the label,
    and with it the content if nothing else is left, as ADK would not have sent it.
    """
    parts = list(content.parts or ())
    text = parts[0].text if len(parts) == 1 else None
    if head and tail and isinstance(text, str) and text.startswith(head) and text.endswith(tail) and self.full in text:
      inner = self.system(text[len(head): len(text) - len(tail)])
      if not inner.strip():
        return None
      return content.model_copy(update={"parts": [parts[0].model_copy(update={"text": head + inner + tail})]})
    changed = False
    for i, part in enumerate(parts):
      if part.text and self.full in part.text:
        parts[i] = part.model_copy(update={"text": part.text.replace(self.full, self.reduced or self.empty, 1)})
        changed = True
    return content.model_copy(update={"parts": parts}) if changed else content

  @property
  def empty(self) -> str:
    """The listing of no names (ADK writes none, but a labelled content must keep its text)."""
    return self.full.replace(self._listed, "[]", 1)


async def listing_edit(names: Sequence[str], is_own: Callable[[str], bool]) -> Optional[ListingEdit]:
  """How to take the names ``is_own`` picks out of ADK's listing of ``names`` (None: none to take)."""
  kept = [n for n in names if not is_own(n)]
  if len(kept) == len(names):
    return None
  full = await listing_text(names)
  if not full:
    return None
  reduced = await listing_text(kept) if kept else None
  if kept and reduced is None:
    return None
  return ListingEdit(names, full, reduced)


def uses_load_artifacts(llm_request: Any) -> bool:
  """The request carries ADK's ``load_artifacts`` tool (its listing is in the instructions)."""
  tool = (getattr(llm_request, "tools_dict", None) or {}).get("load_artifacts")
  if tool is None:
    return False
  try:
    from google.adk.tools.load_artifacts_tool import LoadArtifactsTool
  except ImportError:  # pragma: no cover - an ADK without the tool
    return False
  return isinstance(tool, LoadArtifactsTool)
