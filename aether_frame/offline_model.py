"""A deterministic offline ``BaseLlm`` for the demo and the tests.

It records exactly what it received, answers from a script (text or tool
calls), and reports ``usage_metadata.prompt_token_count`` from a *different*
tokenizer (cl100k_base, plus framing), so the calibration loop has a real
gap to learn, as it would against Gemini.

Streamed (``RunConfig(streaming_mode=SSE)`` and ``stream_chunks`` > 0), it
answers as ADK's Gemini model does: each text part in ``stream_chunks``
partial responses, then one final response with the whole content and the
usage (on the partials too with ``partial_usage``, as Gemini reports it).
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Callable, Optional, Union

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

Reply = Union[str, types.Content, Callable[[LlmRequest], Union[str, types.Content]]]


class OfflineLlm(BaseLlm):
  """Scripted, recording model. ``script`` items are used in order, then ``default``."""

  model: str = "offline-model"
  script: list[Any] = Field(default_factory=list)
  default: Any = "ok"
  report_usage: bool = True
  stream_chunks: int = 0
  partial_usage: bool = False
  _received: list[LlmRequest] = PrivateAttr(default_factory=list)
  _cursor: int = PrivateAttr(default=0)

  @classmethod
  def supported_models(cls) -> list[str]:
    return [r"offline-.*"]

  @property
  def received(self) -> list[LlmRequest]:
    return self._received

  async def generate_content_async(
      self, llm_request: LlmRequest, stream: bool = False
  ) -> AsyncGenerator[LlmResponse, None]:
    snapshot = llm_request.model_copy(deep=True)
    snapshot.tools_dict = dict(llm_request.tools_dict)
    self._received.append(snapshot)
    reply = self.script[self._cursor] if self._cursor < len(self.script) else self.default
    self._cursor += 1
    if callable(reply):
      reply = reply(llm_request)
    content = reply if isinstance(reply, types.Content) else types.Content(role="model", parts=[types.Part(text=str(reply))])
    usage = None
    if self.report_usage:
      usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=_foreign_count(llm_request))
    if stream and self.stream_chunks > 0:
      for part in content.parts or ():
        for piece in _pieces(part.text or "", self.stream_chunks):
          chunk = types.Content(role="model", parts=[types.Part(text=piece, thought=part.thought)])
          yield LlmResponse(content=chunk, partial=True, usage_metadata=usage if self.partial_usage else None)
    yield LlmResponse(content=content, usage_metadata=usage)


def _pieces(text: str, n: int) -> list[str]:
  """``text`` cut into at most ``n`` non-empty pieces, in order."""
  size = max(1, -(-len(text) // n))
  return [text[i:i + size] for i in range(0, len(text), size)]


def _foreign_count(llm_request: LlmRequest) -> int:
  """Prompt size under another tokenizer, like a provider's own count."""
  from .adk.guard import count_request
  from .tokenizers import get_counter
  return count_request(llm_request.contents, llm_request.config, get_counter("cl100k_base")) + 3


def tool_call(name: str, args: Optional[dict] = None, call_id: Optional[str] = None) -> types.Content:
  return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args or {}, id=call_id))])
