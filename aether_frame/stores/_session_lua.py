"""Lua scripts of the Redis session service.

Every script validates key types and stored fields before its first write:
Redis does not roll back a script that fails half-way, so a check that fails
after a write would leave a half-written event. The `#!lua` shebang (Redis
7+) makes Redis refuse a writing script up front when it is out of memory,
for the same reason.

Key layout (KEYS order is shared by the scripts):
  meta      hash   ver, mtime, ctime, app, user, id, lastid, nonce,
                   and `s:<key>` -> JSON for session-scoped state
  events    stream one entry per event: e=<event JSON>, t=<timestamp>;
                   entry id <ms of timestamp>-<seq>, clamped to stay increasing
  event_ids hash   event id -> "<version after append> <stream entry id>
                   <update time before append>" (older entries lack the
                   time)
  ustate    hash   user-scoped state, raw key -> JSON
  uindex    zset   session id scored by last update time; ids of expired
                   sessions are dropped by list_sessions and create_session
  astate    hash   app-scoped state (omitted in Cluster mode: other slot)
  ausers    set    user ids with sessions in the app (omitted likewise); a
                   delete of a user's last session takes the user out, and
                   users whose sessions all expired are dropped by
                   list_sessions (PRUNE_USERS)
"""

from __future__ import annotations

from ._lua_common import LUA_GUARDS

_COMMON = LUA_GUARDS + r"""

-- Reads an ARGV block `n k1 v1 ... kn vn` starting at pos.
local function block(pos)
  local n = tonumber(ARGV[pos])
  local out = {}
  for i = 1, n do
    out[#out + 1] = ARGV[pos + 2 * i - 1]
    out[#out + 1] = ARGV[pos + 2 * i]
  end
  return out, pos + 2 * n + 1
end

-- HSET in chunks: unpack() has a stack limit.
local function hset(key, flat)
  local i = 1
  while i <= #flat do
    local j = math.min(i + 999, #flat)
    redis.call('HSET', key, unpack(flat, i, j))
    i = j + 1
  end
end

local function check_types(with_app)
  expect(KEYS[1], 'hash')
  expect(KEYS[2], 'stream')
  expect(KEYS[3], 'hash')
  expect(KEYS[4], 'hash')
  expect(KEYS[5], 'zset')
  if with_app then
    expect(KEYS[6], 'hash')
    expect(KEYS[7], 'set')
  end
end

local function no_orphans()
  if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
    corrupt(KEYS[1], 'session hash is missing but its events exist')
  end
end

-- Every append adds one stream entry and bumps ver, and nothing trims the
-- stream, so a mismatch means keys were evicted, truncated or edited.
local function check_count(ver)
  local n = redis.call('XLEN', KEYS[2])
  if n ~= tonumber(ver) then
    corrupt(KEYS[2], 'holds ' .. n .. ' events but the session hash records '
            .. ver .. ' appends (evicted by maxmemory-policy, or edited?)')
  end
end

local function expire_all(ttl)
  if ttl > 0 then
    for i = 1, #KEYS do
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  end
end
"""

CREATE = "#!lua\n" + _COMMON + r"""
-- ARGV: sid, app, user, now, nonce, ttl_ms, [session block], [user block],
--       [app block]
local with_app = KEYS[6] ~= nil
check_types(with_app)
local sid, app, user, now, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ttl = tonumber(ARGV[6])
local sstate, p = block(7)
local ud, p2 = block(p)
local ad = block(p2)

if redis.call('EXISTS', KEYS[1]) == 1 then
  -- A create whose reply was lost and that redis-py retried is ours.
  local m = redis.call('HMGET', KEYS[1], 'nonce', 'ver', 'mtime')
  if m[1] == nonce then
    local astate = {}
    if with_app then astate = redis.call('HGETALL', KEYS[6]) end
    return {'ok', m[2], m[3], redis.call('HGETALL', KEYS[4]), astate}
  end
  return {'exists'}
end
no_orphans()

redis.call('HSET', KEYS[1], 'app', app, 'user', user, 'id', sid,
           'ctime', now, 'mtime', now, 'ver', '0', 'nonce', nonce)
hset(KEYS[1], sstate)
hset(KEYS[4], ud)
redis.call('ZADD', KEYS[5], now, sid)
local astate = {}
if with_app then
  hset(KEYS[6], ad)
  redis.call('SADD', KEYS[7], user)
  astate = redis.call('HGETALL', KEYS[6])
end
expire_all(ttl)
return {'ok', '0', now, redis.call('HGETALL', KEYS[4]), astate}
"""

APPEND = "#!lua\n" + _COMMON + r"""
-- ARGV: sid, event_id, event_json, ts, marker, session_mtime, ttl_ms,
--       [session block], [user block], [app block]
local with_app = KEYS[6] ~= nil
check_types(with_app)
local sid, eid, json, ts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local marker, smtime, ttl = ARGV[5], ARGV[6], tonumber(ARGV[7])
local sd, p = block(8)
local ud, p2 = block(p)
local ad = block(p2)

if redis.call('EXISTS', KEYS[1]) == 0 then
  no_orphans()
  return {'missing'}
end
local m = redis.call('HMGET', KEYS[1], 'ver', 'mtime', 'lastid')
local ver, mtime, lastid = m[1], m[2], m[3]
if not ver or not tonumber(ver) or not mtime or not tonumber(mtime) then
  corrupt(KEYS[1], 'field ver or mtime is missing or not a number')
end
check_count(ver)

-- ver restarts at 0 when a deleted session is re-created, so a current copy
-- must also have the stored update time (which every current copy has).
local current = marker == ver and tonumber(smtime) == tonumber(mtime)

-- Re-delivery of an event already stored is acknowledged without storing it
-- again to a current copy (it has every stored event: 'seen'), and, as a
-- retry after a lost reply, to the copy that was current just before that
-- append, if it is the last one (or that has no marker, so cannot tell): any
-- other copy missed appends and is stale.
if eid ~= '' then
  local prev = redis.call('HGET', KEYS[3], eid)
  if prev then
    local pver, xid, pmtime = string.match(prev, '^(%d+) (%S+) ?(%S*)$')
    if not pver then
      corrupt(KEYS[3], 'field ' .. eid .. ' is not "<version> <entry id>'
              .. ' [<update time>]"')
    end
    local same = false
    local entry = redis.call('XRANGE', KEYS[2], xid, xid)
    if #entry == 1 then
      local f = entry[1][2]
      for j = 1, #f, 2 do
        if f[j] == 'e' and f[j + 1] == json then same = true end
      end
    end
    if not same then return {'dupid', ver, mtime} end
    if current then return {'dup', ver, mtime, 'seen'} end
    -- Like `current`, for the version before: the update time tells a copy
    -- of a deleted and re-created session apart.
    local retry = marker == '' or (tonumber(marker) == tonumber(pver) - 1
        and (pmtime == '' or tonumber(pmtime) == tonumber(smtime)))
    if pver == ver and retry then return {'dup', ver, mtime, ''} end
    return {'stale', ver, mtime}
  end
end

if marker ~= '' then
  if not current then return {'stale', ver, mtime} end
elseif tonumber(mtime) > tonumber(smtime) then
  return {'stale', ver, mtime}
end

local tsn = tonumber(ts)
if not tsn then return redis.error_reply('event timestamp is not a number') end
local ms = math.floor(tsn * 1000)
if ms < 0 then ms = 0 end
local seq = 0
if lastid then
  local dash = string.find(lastid, '-', 1, true)
  local lms = dash and tonumber(string.sub(lastid, 1, dash - 1))
  local lseq = dash and tonumber(string.sub(lastid, dash + 1))
  if not lms or not lseq then corrupt(KEYS[1], 'field lastid is not a stream id') end
  if ms <= lms then
    ms = lms
    seq = lseq + 1
  end
end
if ms == 0 and seq == 0 then seq = 1 end
local xid = string.format('%d-%d', ms, seq)
local nver = string.format('%d', tonumber(ver) + 1)

-- Writes start here; nothing below can fail on stored data.
redis.call('XADD', KEYS[2], xid, 'e', json, 't', ts)
if eid ~= '' then
  redis.call('HSET', KEYS[3], eid, nver .. ' ' .. xid .. ' ' .. mtime)
end
redis.call('HSET', KEYS[1], 'ver', nver, 'mtime', ts, 'lastid', xid)
hset(KEYS[1], sd)
hset(KEYS[4], ud)
if with_app then hset(KEYS[6], ad) end
redis.call('ZADD', KEYS[5], ts, sid)
expire_all(ttl)
return {'ok', nver, ts}
"""

GET = "#!lua flags=no-writes\n" + _COMMON + r"""
-- ARGV: k ('' = all events), after_timestamp ('' = none)
-- Returns {'ok', meta, events newest first, user state, app state}.
local with_app = KEYS[6] ~= nil
check_types(with_app)
if redis.call('EXISTS', KEYS[1]) == 0 then
  no_orphans()
  return {'missing'}
end
local ver = redis.call('HGET', KEYS[1], 'ver')
if not ver or not tonumber(ver) then
  corrupt(KEYS[1], 'field ver is missing or not a number')
end
check_count(ver)
local k = tonumber(ARGV[1])
local after = tonumber(ARGV[2])
local out = {}
if k ~= 0 then
  local minid = '-'
  if after then
    local ms = math.floor(after * 1000)
    if ms > 0 then minid = string.format('%d', ms) end
  end
  local maxid = '+'
  local batch = k or 512
  if batch > 512 then batch = 512 end
  local done = false
  while not done do
    local got = redis.call('XREVRANGE', KEYS[2], maxid, minid, 'COUNT', batch)
    for _, e in ipairs(got) do
      local f = e[2]
      local ts, js
      for j = 1, #f, 2 do
        if f[j] == 't' then ts = tonumber(f[j + 1])
        elseif f[j] == 'e' then js = f[j + 1] end
      end
      if not ts or not js then
        corrupt(KEYS[2], 'entry ' .. e[1] .. ' lacks a numeric t or an e field')
      end
      if not after or ts >= after then
        out[#out + 1] = js
        if k and #out >= k then
          done = true
          break
        end
      end
    end
    if #got < batch then done = true end
    if not done then maxid = '(' .. got[#got][1] end
  end
end
local astate = {}
if with_app then astate = redis.call('HGETALL', KEYS[6]) end
return {'ok', redis.call('HGETALL', KEYS[1]), out,
        redis.call('HGETALL', KEYS[4]), astate}
"""

DELETE = "#!lua\n" + _COMMON + r"""
-- KEYS: meta, events, event_ids, ustate, uindex[, astate, ausers];
-- ARGV: sid, user
local with_app = KEYS[6] ~= nil
check_types(with_app)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[5], ARGV[1])
if with_app and redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SREM', KEYS[7], ARGV[2])
end
return 1
"""

APP_WRITE = "#!lua\n" + _COMMON + r"""
-- Cluster mode only: app-wide keys live in their own slot.
-- KEYS: app_state, app_users; ARGV: ttl_ms, add_user ('1'/'0'), user,
--       [app block]. A flag, not '' for none: '' is a valid user id.
expect(KEYS[1], 'hash')
expect(KEYS[2], 'set')
local ttl = tonumber(ARGV[1])
local ad = block(4)
hset(KEYS[1], ad)
if ARGV[2] == '1' then redis.call('SADD', KEYS[2], ARGV[3]) end
expire_all(ttl)
return redis.call('HGETALL', KEYS[1])
"""

PRUNE = "#!lua\n" + _COMMON + r"""
-- Drops index entries of sessions that expired (or were lost), re-checking
-- here so that a session re-created meanwhile keeps its entry.
-- KEYS: uindex, then the session hash of each id; ARGV: the ids
expect(KEYS[1], 'zset')
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
"""

PRUNE_USERS = "#!lua\n" + _COMMON + r"""
-- Drops users with no session left (all expired or deleted) from the app's
-- user set, re-checking each user's index here so that a user whose create
-- landed since the caller looked stays.
-- KEYS: ausers, then each user's uindex; ARGV: the user ids
expect(KEYS[1], 'set')
for i = 2, #KEYS do expect(KEYS[i], 'zset') end
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    n = n + redis.call('SREM', KEYS[1], ARGV[i])
  end
end
return n
"""

SOURCES = {
    "create": CREATE,
    "append": APPEND,
    "get": GET,
    "delete": DELETE,
    "app_write": APP_WRITE,
    "prune": PRUNE,
    "prune_users": PRUNE_USERS,
}
