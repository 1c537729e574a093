"""The Lua scripts of the Redis queue: each state change is one atomic script.

Keys of a job live under one hash tag (``prefix{job}``), so on a Redis
Cluster they share a slot; the scripts derive them from ``ARGV[1]`` (the key
base) and are routed by ``KEYS[1]`` (the job's meta hash).

Per job: ``:meta`` (policy, sequence), ``:stream`` (work entries, consumer
group ``workers``), ``:s:<id>`` (one hash per shard, the truth about it),
``:ids`` and ``:dead`` (sorted by enqueue order), ``:delayed`` (shards waiting
out a backoff, scored by ready time), ``:counts`` (statistics).
"""

from __future__ import annotations

PRELUDE = """
local base = ARGV[1]
local now = tonumber(ARGV[2])
local stream = base .. ':stream'
local counts = base .. ':counts'
local GROUP = 'workers'
local function skey(id) return base .. ':s:' .. id end
local function job_exists() return redis.call('EXISTS', base .. ':meta') == 1 end
local function move(from, to)
  redis.call('HINCRBY', counts, from, -1)
  redis.call('HINCRBY', counts, to, 1)
end
local function drop_entry(entry)
  if entry and entry ~= '' then
    redis.call('XACK', stream, GROUP, entry)
    redis.call('XDEL', stream, entry)
  end
end
local function missing()
  if job_exists() then return {'unknown'} end
  return {'nojob'}
end
-- The fencing check: the shard is leased, under this token, and not expired.
local function valid_lease(id, token)
  local f = redis.call('HMGET', skey(id), 'state', 'token', 'deadline', 'entry', 'attempts')
  if not f[1] then return nil, missing() end
  if f[1] ~= 'leased' or tonumber(f[2]) ~= token or tonumber(f[3]) <= now then
    return nil, {'lost', f[1], f[2], f[3] or ''}
  end
  return f, nil
end
"""

ENQUEUE = (
    PRELUDE
    + """
local meta = base .. ':meta'
if redis.call('EXISTS', meta) == 0 then
  redis.call('HSET', meta, 'max_attempts', ARGV[3], 'backoff_base_ms', ARGV[4], 'backoff_max_ms', ARGV[5], 'seq', 0)
  pcall(redis.call, 'XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
  redis.call('HSET', counts, 'pending', 0, 'leased', 0, 'done', 0, 'dead', 0,
             'attempts', 0, 'failures', 0, 'releases', 0, 'reclaims', 0)
end
local seq = tonumber(redis.call('HGET', meta, 'seq'))
local added = 0
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  local h = skey(id)
  if redis.call('EXISTS', h) == 0 then
    seq = seq + 1
    local entry = redis.call('XADD', stream, '*', 'id', id)
    redis.call('HSET', h, 'payload', ARGV[i + 1], 'state', 'pending', 'token', 0, 'attempts', 0,
               'failures', 0, 'releases', 0, 'entry', entry, 'seq', seq)
    redis.call('ZADD', base .. ':ids', seq, id)
    added = added + 1
  end
end
redis.call('HSET', meta, 'seq', seq)
redis.call('HINCRBY', counts, 'pending', added)
return added
"""
)

CLAIM = (
    PRELUDE
    + """
local n, lease, worker, min_idle = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
if not job_exists() then return {{'nojob'}} end
local max_attempts = tonumber(redis.call('HGET', base .. ':meta', 'max_attempts'))
-- Shards whose backoff has passed go back into the stream first.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', base .. ':delayed', '-inf', now, 'LIMIT', 0, n)) do
  redis.call('ZREM', base .. ':delayed', id)
  redis.call('HSET', skey(id), 'entry', redis.call('XADD', stream, '*', 'id', id))
end
local out = {}
local function grant(id, eid, reclaimed)
  local h = skey(id)
  local token = redis.call('HINCRBY', h, 'token', 1)
  local attempts = redis.call('HINCRBY', h, 'attempts', 1)
  redis.call('HSET', h, 'state', 'leased', 'worker', worker, 'deadline', now + lease, 'lease', lease, 'entry', eid)
  redis.call('HINCRBY', counts, 'attempts', 1)
  if reclaimed then redis.call('HINCRBY', counts, 'reclaims', 1) else move('pending', 'leased') end
  out[#out + 1] = {id, redis.call('HGET', h, 'payload'), token, attempts, now + lease}
end
-- Expired leases: XAUTOCLAIM finds entries idle (no heartbeat) for min_idle;
-- the shard hash's deadline decides whether the lease really expired.
local cursor = redis.call('GET', base .. ':cursor') or '0-0'
for _ = 1, 3 do
  if #out >= n then break end
  local res = redis.call('XAUTOCLAIM', stream, GROUP, worker, min_idle, cursor, 'COUNT', n - #out)
  cursor = res[1]
  for _, e in ipairs(res[2]) do
    local eid, id = e[1], e[2][2]
    local f = redis.call('HMGET', skey(id), 'state', 'deadline', 'entry', 'attempts')
    if f[3] ~= eid then
      drop_entry(eid)
    elseif f[1] == 'leased' and tonumber(f[2]) <= now then
      if tonumber(f[4]) >= max_attempts then
        redis.call('HSET', skey(id), 'state', 'dead', 'entry', '', 'error', 'lease expired on the last attempt')
        drop_entry(eid)
        redis.call('ZADD', base .. ':dead', redis.call('HGET', skey(id), 'seq'), id)
        move('leased', 'dead')
      else
        grant(id, eid, true)
      end
    end
  end
  if cursor == '0-0' then break end
end
redis.call('SET', base .. ':cursor', cursor)
if #out < n then
  local r = redis.call('XREADGROUP', 'GROUP', GROUP, worker, 'COUNT', n - #out, 'STREAMS', stream, '>')
  if r then
    for _, e in ipairs(r[1][2]) do
      local eid, id = e[1], e[2][2]
      local f = redis.call('HMGET', skey(id), 'state', 'entry')
      if f[1] == 'pending' and f[2] == eid then grant(id, eid, false) else drop_entry(eid) end
    end
  end
end
return out
"""
)

HEARTBEAT = (
    PRELUDE
    + """
local id, token, lease, worker = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local f, err = valid_lease(id, token)
if not f then return err end
if lease == 0 then lease = tonumber(redis.call('HGET', skey(id), 'lease')) end
redis.call('HSET', skey(id), 'deadline', now + lease)
-- Claiming the entry again resets its idle time, so XAUTOCLAIM passes it by.
redis.call('XCLAIM', stream, GROUP, worker, 0, f[4], 'JUSTID')
return {'ok', now + lease}
"""
)

COMPLETE = (
    PRELUDE
    + """
local id, token, ref = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local f = redis.call('HMGET', skey(id), 'state', 'token', 'output_ref')
if not f[1] then return missing() end
if f[1] == 'done' and tonumber(f[2]) == token then
  if f[3] == ref then return {'again'} end
  return {'other', f[3]}
end
local g, err = valid_lease(id, token)
if not g then return err end
redis.call('HSET', skey(id), 'state', 'done', 'output_ref', ref, 'entry', '', 'deadline', '')
drop_entry(g[4])
move('leased', 'done')
return {'ok'}
"""
)

RELEASE = (
    PRELUDE
    + """
local id, token = ARGV[3], tonumber(ARGV[4])
local f, err = valid_lease(id, token)
if not f then return err end
local h = skey(id)
drop_entry(f[4])
redis.call('HSET', h, 'state', 'pending', 'deadline', '', 'entry', redis.call('XADD', stream, '*', 'id', id))
redis.call('HINCRBY', h, 'attempts', -1)
redis.call('HINCRBY', h, 'releases', 1)
redis.call('HINCRBY', counts, 'attempts', -1)
redis.call('HINCRBY', counts, 'releases', 1)
move('leased', 'pending')
return {'ok'}
"""
)

FAIL = (
    PRELUDE
    + """
local id, token, message = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local f, err = valid_lease(id, token)
if not f then return err end
local h = skey(id)
local meta = redis.call('HMGET', base .. ':meta', 'max_attempts', 'backoff_base_ms', 'backoff_max_ms')
local attempts = tonumber(f[5])
drop_entry(f[4])
redis.call('HINCRBY', h, 'failures', 1)
redis.call('HINCRBY', counts, 'failures', 1)
redis.call('HSET', h, 'error', message, 'entry', '', 'deadline', '')
if attempts >= tonumber(meta[1]) then
  redis.call('HSET', h, 'state', 'dead')
  redis.call('ZADD', base .. ':dead', redis.call('HGET', h, 'seq'), id)
  move('leased', 'dead')
  return {'ok', 'dead'}
end
local backoff = math.min(tonumber(meta[3]), tonumber(meta[2]) * 2 ^ (attempts - 1))
redis.call('HSET', h, 'state', 'pending')
redis.call('ZADD', base .. ':delayed', now + backoff, id)
move('leased', 'pending')
return {'ok', 'pending'}
"""
)

RETRY_DEAD = (
    PRELUDE
    + """
if not job_exists() then return {'nojob'} end
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', base .. ':dead', 0, -1) end
for _, id in ipairs(ids) do
  if redis.call('EXISTS', skey(id)) == 0 then return {'unknown', id} end
end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', base .. ':dead', id) == 1 then
    redis.call('HSET', skey(id), 'state', 'pending', 'attempts', 0,
               'entry', redis.call('XADD', stream, '*', 'id', id))
    move('dead', 'pending')
    n = n + 1
  end
end
return {'ok', n}
"""
)
