"""Lua helpers shared by the session and memory scripts.

Both raise the same ``AFCORRUPT <key> <detail>`` error, which the Python side
maps to ``CorruptDataError`` naming the key.
"""

from __future__ import annotations

LUA_GUARDS = r"""
local function corrupt(key, detail)
  error({err = 'AFCORRUPT ' .. key .. ' ' .. detail})
end

local function expect(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    corrupt(key, 'holds a Redis ' .. t .. ', expected a ' .. want)
  end
end
"""
