"""Shared stores for multi-worker deployments: sessions, memory and working
memory in Redis, so any worker can continue any session."""

from .errors import CorruptDataError
from .errors import DuplicateEventIdError
from .errors import RedisStoreError
from .errors import StoreUnavailableError
from .redis_memory import RedisMemoryService
from .redis_sessions import RedisSessionService
from .working_memory import WorkingMemory

__all__ = [
    "CorruptDataError",
    "DuplicateEventIdError",
    "RedisMemoryService",
    "RedisSessionService",
    "RedisStoreError",
    "StoreUnavailableError",
    "WorkingMemory",
]
