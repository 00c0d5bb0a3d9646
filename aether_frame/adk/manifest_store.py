"""Writes each pack's manifest through the app's ArtifactService.

ADK versions an artifact per save, so one stable filename gives a versioned
history per session: File locally, GCS in production, no storage code here.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from google.genai import types

from ..core import manifest as manifest_doc

logger = logging.getLogger("aether_frame." + __name__)

MANIFEST_FILENAME = "context_pack/manifest.json"
MANIFEST_MIME = "application/json"


class ManifestWriter:
  """Saves manifests; with no artifact service it logs once and keeps running."""

  def __init__(self, filename: str = MANIFEST_FILENAME):
    self.filename = filename
    self._warned = False
    self.last_document: Optional[dict[str, Any]] = None

  def document(self, body: dict[str, Any], runtime: dict[str, Any], compile_input: Optional[Callable] = None) -> dict[str, Any]:
    return manifest_doc.finalize(body, runtime)

  async def write(self, ctx, body: dict[str, Any], runtime: dict[str, Any], compile_input: Optional[Callable] = None) -> Optional[int]:
    doc = self.document(body, runtime, compile_input)
    self.last_document = doc
    if ctx._invocation_context.artifact_service is None:
      if not self._warned:
        self._warned = True
        logger.warning("no artifact service configured; context-pack manifests are not stored")
      return None
    part = types.Part(inline_data=types.Blob(mime_type=MANIFEST_MIME, data=manifest_doc.dumps(doc)))
    return await ctx.save_artifact(self.filename, part)
