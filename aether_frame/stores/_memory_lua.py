"""Lua scripts of the Redis memory index and the working-memory notes.

The BM25 index of one (app, user) is a handful of keys under the user's hash
tag, so one script updates documents, postings and corpus statistics
atomically and every worker ranks against the same numbers.

Index keys (KEYS order shared by the scripts):
  docs    hash  memory id -> MemoryEntry JSON
  lens    hash  memory id -> document length in terms
  ts      hash  memory id -> unix timestamp (ranking tie-break: newer first)
  terms   hash  memory id -> space-separated encoded terms (to unindex)
  stats   hash  n = document count, len = total document length
  deleted set   stored ids deleted by delete_memory; event ingestion skips them
  alias   hash  memory id -> JSON list of the other keys its id is stored under
  sums    hash  memory id -> digest of its JSON (a re-add sends only what changed)
  t:<term> hash memory id -> term frequency (the posting list)

A memory is stored under its id, except an event whose id is already stored
for another session (ids are unique per session only: ADK's own stores key
events by session too): that one is stored under ``<id> US <session id>``
(US = the unit separator, byte 31) and listed in ``alias``, so neither
session's memory overwrites the other's, and delete_memory finds both.
"""

from __future__ import annotations

from ._lua_common import LUA_GUARDS

_COMMON = LUA_GUARDS + r"""
local UNKNOWN_SESSION = '__unknown_session_id__'

local function stat(name)
  local v = redis.call('HGET', KEYS[5], name)
  if not v then return 0 end
  local n = tonumber(v)
  if not n then corrupt(KEYS[5], 'field ' .. name .. ' is not a number') end
  return n
end

-- Term name -> posting key, from ARGV[2] = count and the names after it.
local function term_keys(first_key)
  local t = tonumber(ARGV[2])
  local map = {}
  for i = 1, t do
    map[ARGV[2 + i]] = KEYS[first_key + i - 1]
    expect(KEYS[first_key + i - 1], 'hash')
  end
  return map, 3 + t
end

-- Posting keys of a stored document's old terms that the caller did not
-- declare; the caller retries with them (scripts may only touch KEYS).
local function missing_terms(id, map, missing)
  local old = redis.call('HGET', KEYS[4], id)
  if old then
    for term in string.gmatch(old, '%S+') do
      if not map[term] then missing[#missing + 1] = term end
    end
  end
end

local function unindex(id, map)
  local old = redis.call('HGET', KEYS[4], id)
  if not old then return end
  for term in string.gmatch(old, '%S+') do
    redis.call('HDEL', map[term], id)
  end
  local dl = tonumber(redis.call('HGET', KEYS[2], id)) or 0
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[8], id)
  redis.call('HINCRBY', KEYS[5], 'n', -1)
  redis.call('HINCRBY', KEYS[5], 'len', -dl)
end

local function check_index_types()
  expect(KEYS[1], 'hash')
  expect(KEYS[2], 'hash')
  expect(KEYS[3], 'hash')
  expect(KEYS[4], 'hash')
  expect(KEYS[5], 'hash')
  expect(KEYS[6], 'set')
  expect(KEYS[7], 'hash')
  expect(KEYS[8], 'hash')
  stat('n')
  stat('len')
end

-- The keys id is stored under besides itself (alias), as a Lua list.
local function aliases(id)
  local raw = redis.call('HGET', KEYS[7], id)
  if not raw then return {} end
  local ok, list = pcall(cjson.decode, raw)
  if not ok or type(list) ~= 'table' then corrupt(KEYS[7], 'field ' .. id .. ' is not a JSON list') end
  return list
end

-- The session a stored document came from ('' when unknown or unreadable).
local function stored_session(json)
  local ok, doc = pcall(cjson.decode, json)
  if not ok or type(doc) ~= 'table' or type(doc.custom_metadata) ~= 'table' then return '' end
  local sid = doc.custom_metadata.session_id
  if type(sid) ~= 'string' or sid == UNKNOWN_SESSION then return '' end
  return sid
end
"""

ADD = "#!lua\n" + _COMMON + r"""
-- KEYS: docs, lens, ts, terms, stats, deleted, alias, sums, posting keys...
-- ARGV: mode ('events' skips deleted ids), T, T term names, ndocs, then per
--       document: id, session id ('' unknown), json, digest, ts, dl, terms
--       string, nt, (term index, tf) * nt
check_index_types()
local map, pos = term_keys(9)
local mode = ARGV[1]
local names = {}
for i = 1, tonumber(ARGV[2]) do names[i] = ARGV[2 + i] end
local ndocs = tonumber(ARGV[pos])
pos = pos + 1
local docs = {}
for d = 1, ndocs do
  local doc = {id = ARGV[pos], sid = ARGV[pos + 1], json = ARGV[pos + 2], sum = ARGV[pos + 3],
               ts = ARGV[pos + 4], dl = tonumber(ARGV[pos + 5]), terms = ARGV[pos + 6], post = {}}
  local nt = tonumber(ARGV[pos + 7])
  pos = pos + 8
  for i = 1, nt do
    doc.post[#doc.post + 1] = {names[tonumber(ARGV[pos])], ARGV[pos + 1]}
    pos = pos + 2
  end
  docs[d] = doc
end

-- Decide and validate before the first write.
local todo, missing, unsummed = {}, {}, {}
for _, doc in ipairs(docs) do
  local skip = false
  doc.key = doc.id
  if mode == 'events' and doc.sid ~= '' then
    local own = doc.id .. '\31' .. doc.sid
    local listed = false
    for _, k in ipairs(aliases(doc.id)) do if k == own then listed = true end end
    if listed then
      doc.key = own  -- this session's copy already sits beside another's
    else
      local stored = redis.call('HGET', KEYS[1], doc.id)
      if stored then
        local other = stored_session(stored)
        if other ~= '' and other ~= doc.sid then doc.key = own end
      end
    end
  end
  if mode == 'events' and redis.call('SISMEMBER', KEYS[6], doc.id) == 1 then
    skip = true
  elseif redis.call('HGET', KEYS[1], doc.key) == doc.json
      and redis.call('HGET', KEYS[4], doc.key) == doc.terms then
    skip = true  -- unchanged (a document stored before its digest existed gets one below)
    if redis.call('HGET', KEYS[8], doc.key) ~= doc.sum then unsummed[#unsummed + 1] = doc end
  end
  if not skip then
    missing_terms(doc.key, map, missing)
    todo[#todo + 1] = doc
  end
end
if #missing > 0 then
  table.insert(missing, 1, 'retry')
  return missing
end

for _, doc in ipairs(todo) do
  unindex(doc.key, map)
  if mode ~= 'events' then redis.call('SREM', KEYS[6], doc.id) end
  if doc.key ~= doc.id then
    local list, known = aliases(doc.id), false
    for _, k in ipairs(list) do if k == doc.key then known = true end end
    if not known then
      list[#list + 1] = doc.key
      redis.call('HSET', KEYS[7], doc.id, cjson.encode(list))
    end
  end
  redis.call('HSET', KEYS[1], doc.key, doc.json)
  redis.call('HSET', KEYS[2], doc.key, doc.dl)
  redis.call('HSET', KEYS[3], doc.key, doc.ts)
  redis.call('HSET', KEYS[4], doc.key, doc.terms)
  redis.call('HSET', KEYS[8], doc.key, doc.sum)
  for _, p in ipairs(doc.post) do
    redis.call('HSET', map[p[1]], doc.key, p[2])
  end
  redis.call('HINCRBY', KEYS[5], 'n', 1)
  redis.call('HINCRBY', KEYS[5], 'len', doc.dl)
end
for _, doc in ipairs(unsummed) do redis.call('HSET', KEYS[8], doc.key, doc.sum) end
return {'ok', tostring(#todo)}
"""

DELETE = "#!lua\n" + _COMMON + r"""
-- KEYS: docs, lens, ts, terms, stats, deleted, alias, sums, posting keys...
-- ARGV: id, T, T term names
-- Deletes the memory under its id and under every alias (other sessions' events with that id).
check_index_types()
local map = term_keys(9)
local id = ARGV[1]
local stored = aliases(id)
table.insert(stored, 1, id)
local missing = {}
for _, key in ipairs(stored) do missing_terms(key, map, missing) end
if #missing > 0 then
  table.insert(missing, 1, 'retry')
  return missing
end
local existed = 0
for _, key in ipairs(stored) do
  if redis.call('HEXISTS', KEYS[1], key) == 1 then existed = 1 end
  unindex(key, map)
end
redis.call('HDEL', KEYS[7], id)
-- Only a memory that existed is kept out of later event ingestion (as ADK's
-- own services do): an unknown id must not block an event never stored.
if existed == 1 then redis.call('SADD', KEYS[6], id) end
return {'ok', tostring(existed)}
"""

SEARCH = "#!lua flags=no-writes\n" + _COMMON + r"""
-- KEYS: docs, lens, ts, terms, stats, deleted, alias, sums, posting keys (query terms)
-- ARGV: k1, b, limit
-- Returns id, score, json triples, best first (score, then newer, then id).
check_index_types()
local k1, b, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n, total = stat('n'), stat('len')
if n <= 0 then return {} end
local avgdl = total / n
if avgdl <= 0 then avgdl = 1 end
local scores, order, lens = {}, {}, {}
for i = 9, #KEYS do
  expect(KEYS[i], 'hash')
  local post = redis.call('HGETALL', KEYS[i])
  local df = #post / 2
  if df > 0 then
    local idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    for j = 1, #post, 2 do
      local id, tf = post[j], tonumber(post[j + 1])
      if not tf then corrupt(KEYS[i], 'posting ' .. id .. ' is not a number') end
      local dl = lens[id]
      if dl == nil then
        dl = tonumber(redis.call('HGET', KEYS[2], id))
        if not dl then corrupt(KEYS[2], 'no numeric length for ' .. id) end
        lens[id] = dl
      end
      if scores[id] == nil then
        scores[id] = 0
        order[#order + 1] = id
      end
      scores[id] = scores[id] + idf * tf * (k1 + 1) /
          (tf + k1 * (1 - b + b * dl / avgdl))
    end
  end
end
local ts = {}
for _, id in ipairs(order) do
  ts[id] = tonumber(redis.call('HGET', KEYS[3], id)) or 0
end
table.sort(order, function(x, y)
  if scores[x] ~= scores[y] then return scores[x] > scores[y] end
  if ts[x] ~= ts[y] then return ts[x] > ts[y] end
  return x < y
end)
local out = {}
for i = 1, math.min(limit, #order) do
  local id = order[i]
  local json = redis.call('HGET', KEYS[1], id)
  if not json then corrupt(KEYS[1], 'posting for ' .. id .. ' but no document') end
  out[#out + 1] = id
  out[#out + 1] = string.format('%.17g', scores[id])
  out[#out + 1] = json
end
return out
"""

NOTE_ADD = "#!lua\n" + r"""
-- KEYS: step notes hash, session steps set; ARGV: ttl_ms, step, note id, json
local function corrupt(key, detail)
  error({err = 'AFCORRUPT ' .. key .. ' ' .. detail})
end
for i, want in ipairs({'hash', 'set'}) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= want then
    corrupt(KEYS[i], 'holds a Redis ' .. t .. ', expected a ' .. want)
  end
end
local fresh_steps = redis.call('EXISTS', KEYS[2]) == 0
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[2])
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  -- Stores with other ttl_seconds share the steps set: it must outlive
  -- every step it lists, so never shorten its TTL or drop a persist.
  local left = redis.call('PTTL', KEYS[2])
  if fresh_steps or (left >= 0 and left < ttl) then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
else
  -- ttl_seconds=None keeps the notes, even in a step that had a TTL.
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return 1
"""

NOTE_CLEAR = "#!lua\n" + r"""
-- KEYS: step notes hash, session steps set; ARGV: step, note ids...
-- Deletes exactly the notes that were checkpointed; notes added meanwhile stay.
local removed = 0
for i = 2, #ARGV do
  removed = removed + redis.call('HDEL', KEYS[1], ARGV[i])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
end
return removed
"""

MEMORY_SOURCES = {"add": ADD, "delete": DELETE, "search": SEARCH}
NOTE_SOURCES = {"add": NOTE_ADD, "clear": NOTE_CLEAR}
