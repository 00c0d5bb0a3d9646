"""Output that is safe to print: what the tools show is anyone's text.

Session and user ids come from clients (ADK's api_server lets them choose),
item ids and pointers from tools and documents. Printed raw, an escape
sequence in one clears the operator's screen or retitles the terminal, and
a line break or carriage return forges a line of output ("checksum ok") or
a log record.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but tab and newline, DEL, and C1 controls."""
FIELD_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""...and within one field, tab and newline too."""


def _escape(m: re.Match) -> str:
  return f"\\x{ord(m.group()):02x}"


def shown(value: Any) -> str:
  """``value`` as one printable field: every control character, line breaks too, as ``\\xNN``."""
  return FIELD_CONTROLS.sub(_escape, str(value))


class TerminalSafe:
  """A text stream that writes control characters (but tab and newline) as ``\\xNN``."""

  def __init__(self, stream: TextIO) -> None:
    self._stream = stream

  def write(self, text: str) -> int:
    self._stream.write(_CONTROLS.sub(_escape, text))
    return len(text)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._stream, name)
