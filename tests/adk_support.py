"""Real ADK Runner plumbing for end-to-end tests (no mocks of ADK)."""

from __future__ import annotations

import json
import struct
import warnings
import zlib
from typing import Any, Optional

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.manifest_store import MANIFEST_FILENAME
from aether_frame.core import manifest as manifest_doc
from aether_frame.offline_model import OfflineLlm

APP = "testapp"
USER = "u1"


def make_runner(agent, plugins, *, artifact_service=None, session_service=None, memory_service=None, app_name=APP):
  app = App(name=app_name, root_agent=agent, plugins=list(plugins))
  return Runner(
      app=app,
      session_service=session_service or InMemorySessionService(),
      artifact_service=artifact_service if artifact_service is not None else InMemoryArtifactService(),
      memory_service=memory_service,
  )


async def new_session(runner, state: Optional[dict] = None, session_id: Optional[str] = None):
  return await runner.session_service.create_session(app_name=runner.app_name, user_id=USER, state=state or {}, session_id=session_id)


async def say(runner, session_id: str, text: str, parts: Optional[list] = None) -> list[Any]:
  msg = types.Content(role="user", parts=[types.Part(text=text), *(parts or [])])
  events = []
  async for ev in runner.run_async(user_id=USER, session_id=session_id, new_message=msg):
    events.append(ev)
  return events


def payload_of(request) -> str:
  last_user = [c for c in request.contents if c.role == "user" and any(p.text for p in c.parts or ())][-1]
  return next(p.text for p in last_user.parts if p.text)


def agent(name: str = "assistant", model: Optional[OfflineLlm] = None, **kw) -> tuple[LlmAgent, OfflineLlm]:
  model = model or OfflineLlm()
  return LlmAgent(name=name, model=model, instruction=kw.pop("instruction", "You are a helpful assistant."), **kw), model


class Recorder(BasePlugin):
  """Runs before the context plugin and keeps a deep copy of each original request."""

  def __init__(self):
    super().__init__("recorder")
    self.requests = []

  async def before_model_callback(self, *, callback_context, llm_request):
    self.requests.append(llm_request.model_copy(deep=True))
    return None


async def manifests(runner, session_id: str, user_id: str = USER) -> list[dict]:
  """Every manifest version the session's artifact service holds, checksums verified, in call order."""
  svc = runner.artifact_service
  kw = dict(app_name=runner.app_name, user_id=user_id, session_id=session_id, filename=MANIFEST_FILENAME)
  docs = []
  for v in sorted(await svc.list_versions(**kw)):
    part = await svc.load_artifact(**kw, version=v)
    docs.append(manifest_doc.verify(json.loads(part.inline_data.data), where=f"manifest v{v}"))
  return docs


def png_bytes(width: int, height: int) -> bytes:
  """A real (tiny, valid, grey) PNG of the given size, for image parts."""
  def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
  raw = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
  ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
  return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def fallback_model(*models):
  """ADK's ``FallbackModel`` over ``models`` (experimental in 2.13: its warning is silenced)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from google.adk.models._fallback_model import FallbackModel
    return FallbackModel(models=list(models))


def independent_tokens(request) -> int:
  """A request's tokens counted without the library's costing code: a floor of what it sends.

  The plugin's fit assertions used ``guard.count_request``, the function the guard
  itself decides with, so a costing bug (a part type ignored, a config field not
  charged) passed them. This count reads the request directly with raw tiktoken:
  system text, response schema, tool declarations and every part (text as text,
  calls and responses as compact JSON, code and its output as text, media at
  their cheapest documented unit),
  4 tokens per content. It is a floor, not the exact figure, so ``fits`` holds
  for a correct costing and fails for one that leaves something out.
  """
  import tiktoken

  enc = tiktoken.get_encoding("o200k_base")

  def n(text: str) -> int:
    return len(enc.encode_ordinary(text)) if text else 0

  def compact(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)

  config = request.config
  total = 0
  si = config.system_instruction if config is not None else None
  if isinstance(si, str):
    total += n(si)
  elif si is not None:
    parts = si.parts if isinstance(si, types.Content) else (si if isinstance(si, list) else [si])
    total += sum(n(p if isinstance(p, str) else (p.text or "")) for p in parts or ())
  for field in ("response_schema", "response_json_schema"):
    value = getattr(config, field, None) if config is not None else None
    if value is not None:
      dumped = value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else value
      total += n(compact(dumped))
  for tool in (config.tools or ()) if config is not None else ():
    for decl in getattr(tool, "function_declarations", None) or ():
      total += n(compact(decl.model_dump(mode="json", exclude_none=True)))
  for content in request.contents:
    total += 4
    for part in content.parts or ():
      if part.text:
        total += n(part.text)
      if part.function_call is not None:
        total += n(compact({"name": part.function_call.name, "args": part.function_call.args or {}}))
      if part.function_response is not None:
        total += n(compact(part.function_response.response or {}))
      if part.executable_code is not None:
        total += n(part.executable_code.code or "")
      if part.code_execution_result is not None:
        total += n(part.code_execution_result.output or "")
      for blob in (part.inline_data, part.file_data):
        if blob is not None:
          mime = (blob.mime_type or "").lower()
          total += 258 if mime.startswith(("image/", "video/", "application/pdf")) else 32 if mime.startswith("audio/") else 0
          if mime in ("audio/wav", "audio/x-wav") and getattr(blob, "data", None):
            total += _wav_tokens(blob.data) - 32
  return total


def _wav_tokens(data: bytes) -> int:
  """32 tokens per second of a WAV, its length read by the stdlib ``wave`` module."""
  import io
  import math
  import wave

  with wave.open(io.BytesIO(data)) as w:
    return math.ceil(max(1.0, w.getnframes() / w.getframerate()) * 32)


def wav_bytes(seconds: float, rate: int = 8000) -> bytes:
  """A real (silent, mono, 16-bit) WAV of the given length."""
  import io
  import wave

  buf = io.BytesIO()
  with wave.open(buf, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(rate)
    w.writeframes(b"\0\0" * int(rate * seconds))
  return buf.getvalue()


def fits(request, window: int, reserve: int) -> None:
  """Asserts the request fits ``window - reserve`` by the independent floor count."""
  got = independent_tokens(request)
  assert got + reserve <= window, f"independent count {got} + reserve {reserve} > window {window}"


def research_reply():
  """A scripted model: calls ``search_notes`` for a request starting "search ", answers
  its result, else notes the turn (a long reply, so sessions overflow small windows)."""
  import itertools

  from aether_frame.offline_model import tool_call

  ids = itertools.count()

  def reply(req):
    resp = next((p.function_response for p in req.contents[-1].parts or () if p.function_response), None)
    if resp is not None:
      return f"Based on {resp.name}: {json.dumps(resp.response, sort_keys=True)[:120]}"
    request = payload_of(req).rsplit("USER REQUEST (VERBATIM):\n", 1)[-1]
    if request.startswith("search "):
      return tool_call("search_notes", {"query": request[7:40]}, f"call-{next(ids)}")
    return f"Noted ({next(ids)}). " + "I will fold that into the vendor comparison and flag gaps. " * 6

  return reply
