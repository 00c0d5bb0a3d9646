"""aether-frame: the context compiler for Google ADK.

``App(..., plugins=[ContextPackPlugin()])`` turns every model call into a
token-budgeted, deterministic, cache-stable Context Pack with a replayable
``manifest.json`` in the app's ArtifactService.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core.allocator import ContextBudgetExhausted
from .core.errors import AetherFrameError
from .core.compiler import CallInputs, CompiledPack, CompileInput, CompilerSession, compile_pack
from .core.items import Item, Layer, Provenance, Trust
from .core.policy import Floors, OverflowPolicy, PackPolicy, Signals, TaskProfile, ToolScoping
from .core.windows import ModelWindows, UnknownModelWindow

__version__ = "0.1.0"

__all__ = [
    "AetherFrameError", "CallInputs", "CompileInput", "CompiledPack", "CompilerSession", "ContextBudgetExhausted",
    "ContextPackOverflow", "ContextPackPlugin", "Floors", "Item", "Layer", "ModelWindows", "OverflowPolicy", "PackPolicy",
    "Provenance", "Signals", "TaskProfile", "ToolScoping", "Trust", "UnknownModelWindow",
    "compile_pack", "context_pack_callbacks", "make_before_model_callback",
]


_ADK_NAMES = ("ContextPackOverflow", "ContextPackPlugin", "context_pack_callbacks", "make_before_model_callback")

if TYPE_CHECKING:  # type checkers and IDEs see the lazily imported names
  from .adk.plugin import ContextPackOverflow, ContextPackPlugin, context_pack_callbacks, make_before_model_callback


def __dir__() -> list[str]:
  return sorted({*globals(), *_ADK_NAMES})


if not TYPE_CHECKING:  # seen by a checker, it would type every name of the package as Any

  def __getattr__(name: str):
    # The ADK glue is imported lazily so the pure core stays importable alone.
    if name in _ADK_NAMES:
      from .adk import plugin
      return getattr(plugin, name)
    raise AttributeError(f"module 'aether_frame' has no attribute {name!r}")
