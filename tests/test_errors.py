"""The library's errors: one base class, and each survives pickling and copying.

multiprocessing, Celery and Ray pickle an exception by calling its class
with ``args``; that failed for the errors whose ``__init__`` takes other
parameters (``ContextBudgetExhausted(...)`` gave ``TypeError: __init__()
missing 3 required keyword-only arguments``).
"""

from __future__ import annotations

import copy
import importlib
import pickle
import pkgutil

import pytest

import aether_frame
from aether_frame import AetherFrameError, ContextBudgetExhausted, ContextPackOverflow, UnknownModelWindow
from aether_frame.adk.manifest_store import CorruptBlobError, MissingBlobsError
from aether_frame.audit.inputs import BlobIntegrityError
from aether_frame.audit.source import LocationError
from aether_frame.audit.spool import SpoolEntryError
from aether_frame.core.canonical import NestedTooDeep
from aether_frame.core.manifest import ManifestIntegrityError
from aether_frame.demo import DemoError
from aether_frame.retrieval.embed import EmbedderUnavailable
from aether_frame.stores.errors import CorruptDataError, DuplicateEventIdError, RedisStoreError, StoreUnavailableError

_exhausted = ContextBudgetExhausted("too big", needs={"system": 900, "reserve": 200}, usable=800, window=1000)
SAMPLES = [
    (_exhausted, {"needs": {"system": 900, "reserve": 200}, "usable": 800, "window": 1000}, ()),
    (ContextPackOverflow("planner", "gemini-2.5-flash", _exhausted),
     {"agent": "planner", "model": "gemini-2.5-flash", "usable": 800}, (ContextBudgetExhausted,)),
    (UnknownModelWindow("no window for 'x'"), {}, (LookupError,)),
    (ManifestIntegrityError("bad digest"), {}, (ValueError,)),
    (BlobIntegrityError("blob abc"), {}, (ManifestIntegrityError, ValueError)),
    (MissingBlobsError("3 blobs"), {}, (LookupError,)),
    (CorruptBlobError("blob def"), {}, (ValueError,)),
    (SpoolEntryError("entry 1"), {}, (ValueError,)),
    (NestedTooDeep("nested deeper than 900 levels"), {}, (RecursionError,)),
    (LocationError("no such folder"), {}, (ValueError,)),
    (EmbedderUnavailable("no torch"), {}, (RuntimeError,)),
    (DemoError("demo failed"), {}, (RuntimeError,)),
    (RedisStoreError("failed", key="s:1"), {"key": "s:1"}, (RuntimeError,)),
    (CorruptDataError("s:2", "bad JSON"), {"key": "s:2", "detail": "bad JSON"}, (RedisStoreError,)),
    (StoreUnavailableError("get", "s:3", ConnectionRefusedError("refused"), "is it running?"),
     {"key": "s:3", "operation": "get"}, (RedisStoreError, ConnectionError, OSError)),
    (DuplicateEventIdError("event e1 exists", key="s:4"), {"key": "s:4"}, (RedisStoreError,)),
]


@pytest.mark.parametrize("error,attrs,bases", SAMPLES, ids=lambda x: type(x).__name__ if isinstance(x, Exception) else "")
def test_an_error_pickles_and_copies_with_its_message_and_attributes(error, attrs, bases):
  for twin in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
    assert type(twin) is type(error) and str(twin) == str(error) and twin.args == error.args
    for name, value in attrs.items():
      assert getattr(twin, name) == value, name
    assert isinstance(twin, AetherFrameError) and all(isinstance(twin, b) for b in bases)


def test_every_error_class_of_the_package_is_an_aether_frame_error_and_sampled_here():
  for info in pkgutil.walk_packages(aether_frame.__path__, "aether_frame."):
    importlib.import_module(info.name)
  found, stack = set(), [AetherFrameError]
  while stack:
    for sub in stack.pop().__subclasses__():
      if sub.__module__.startswith("aether_frame."):
        found.add(sub)
      stack.append(sub)
  assert found == {type(e) for e, _, _ in SAMPLES}
  own = []
  for info in pkgutil.walk_packages(aether_frame.__path__, "aether_frame."):
    module = importlib.import_module(info.name)
    own += [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Exception)
            and v.__module__ == info.name and not v.__name__.startswith("_")]
  assert {c for c in own if not issubclass(c, AetherFrameError)} <= {_cli_error()}, "an error class outside the base"


def _cli_error():
  from aether_frame.cli import CommandError  # a SystemExit carrying the CLI's exit code, not an error to catch

  return CommandError
