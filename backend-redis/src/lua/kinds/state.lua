-- Semaphores, read-write locks, elections: the state of one lock and its rules, sent before every
-- lock script of these kinds (try_acquire, wait_step, release, leave); not a script on its own.
-- Settings: FLOOR, DELAY (constants written before the script, see LockScripts).
-- KEYS: holders, info, fence, queue, alive, writers.
-- ARGV: entry, TTL ms, wake prefix, waiter TTL ms, leader channel ('' but for elections),
-- campaign value.

local HOLDERS, INFO, FENCE, QUEUE, ALIVE, WRITERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ME, TTL, WAKE = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local WTTL, LEADER, VALUE = tonumber(ARGV[4]), ARGV[5], ARGV[6]

local function first(key)
  local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return r[1], r[2]
end
-- An election publishes every change of its leader (an exclusive holder coming or going).
local function announce(m)
  if LEADER ~= '' and role(m) == 'X' then redis.call('PUBLISH', LEADER, 'changed') end
end
-- The longest TTL any current holder was granted is INFO's field '~ttl' (entries all contain ':',
-- so no entry is named so); it goes with the last holder.
local function unhold(m)
  redis.call('ZREM', HOLDERS, m)
  redis.call('HDEL', INFO, m)
  if redis.call('EXISTS', HOLDERS) == 0 then redis.call('DEL', INFO) end
  announce(m)
end
local function holding(m, now)
  local s = redis.call('ZSCORE', HOLDERS, m)
  return s and tonumber(s) > now
end
-- Entry m already holds (a retry, or a grant that was not confirmed in time): its lease starts
-- again now, as the caller counts it from this call (the write is also what a WAIT then
-- confirms); returns its fencing token.
local function held_again(m, now)
  redis.call('ZADD', HOLDERS, 'XX', string.format('%d', now + TTL), m)
  keep(HOLDERS, INFO, TTL)
  return tonumber(string.match(redis.call('HGET', INFO, m) or '', '^(%d+)'))
end
local function drop_waiter(m)
  redis.call('ZREM', QUEUE, m)
  redis.call('ZREM', ALIVE, m)
  if role(m) == 'X' then redis.call('ZREM', WRITERS, m) end
end
-- Bounds deadlines that are further ahead than anything was granted: the server's clock stepped
-- back (Redis and these scores count on its wall clock), and a holder or waiter that died would
-- otherwise keep its place for the whole step. Holders get at most the longest TTL a current
-- holder was granted ('~ttl'; a live holder renewed less than its TTL ago, so it loses nothing it
-- believes in), waiters three of the caller's waiter TTLs (they refresh every third of theirs).
-- One ZRANGE per set when nothing is off.
local function bound_deadlines(now)
  local most = tonumber(redis.call('HGET', INFO, '~ttl'))
  local bounds = {{HOLDERS, most}, {ALIVE, WTTL and 3 * WTTL}}
  for _, b in ipairs(bounds) do
    local set, span = b[1], b[2]
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
    if span and last[2] and tonumber(last[2]) > now + span then
      local cap = string.format('%d', now + span)
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', set, '(' .. cap, '+inf', 'LIMIT', 0, 1000)) do
        redis.call('ZADD', set, 'XX', cap, m)
      end
    end
  end
end
-- Drops the holders past their deadline and the waiters past their liveness (1000 of each at
-- most per call); true if any.
local function prune(now)
  bound_deadlines(now)
  local t = string.format('%d', now)
  local gone = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', t, 'LIMIT', 0, 1000)
  for _, m in ipairs(gone) do unhold(m) end
  local stale = redis.call('ZRANGEBYSCORE', ALIVE, '-inf', t, 'LIMIT', 0, 1000)
  for _, m in ipairs(stale) do drop_waiter(m) end
  return #gone + #stale > 0
end
-- The first exclusive waiter and its arrival score (nil if none).
local function first_writer()
  while true do
    local x, xs = first(WRITERS)
    if not x or redis.call('ZSCORE', QUEUE, x) then return x, xs end
    redis.call('ZREM', WRITERS, x)
  end
end
local function exclusive_held(h)
  return h == 1 and role(first(HOLDERS)) == 'X'
end
-- A permit entry's count when it differs from the semaphore's other entries' (nil otherwise).
local function mismatch(m)
  local n = permits(m)
  if not n then return nil end
  local other = first(HOLDERS)
  if not other then
    other = first(QUEUE)
    if other == m then other = redis.call('ZRANGE', QUEUE, 1, 1)[1] end
  end
  local o = other and permits(other)
  if o and o ~= n then return o end
  return nil
end
-- Whether a new entry would hold at once (try_acquire).
local function holds_at_tail(m)
  local h, r = redis.call('ZCARD', HOLDERS), role(m)
  if r == 'X' then return h == 0 and redis.call('ZCARD', QUEUE) == 0 end
  if r == 'S' then return not exclusive_held(h) and first_writer() == nil end
  return h + redis.call('ZCARD', QUEUE) < permits(m)
end
-- Whether queued entry m may hold now.
local function may_hold(m, h)
  local r = role(m)
  if r == 'X' then return h == 0 and first(QUEUE) == m end
  if r == 'S' then
    if exclusive_held(h) then return false end
    local x, xs = first_writer()
    return not x or tonumber(xs) > tonumber(redis.call('ZSCORE', QUEUE, m))
  end
  return h + redis.call('ZRANK', QUEUE, m) < permits(m)
end
-- ms until the deadline of holder `index` (by deadline), -1 if none.
local function deadline_in(index, now)
  local r = redis.call('ZRANGE', HOLDERS, index, index, 'WITHSCORES')
  if not r[2] then return -1 end
  return math.max(0, tonumber(r[2]) - now)
end
-- For a waiter that may not hold: ms until the holder deadline it waits for (an expiry publishes
-- nothing), or -1 when it waits for a wake-up only (someone ahead of it watches the holders).
local function depends_on(m, h, now)
  local r = role(m)
  if r == 'X' then
    if first(QUEUE) ~= m then return -1 end
    return deadline_in(-1, now)
  end
  if r == 'S' then
    local x, xs = first_writer()
    if x and tonumber(xs) < tonumber(redis.call('ZSCORE', QUEUE, m)) then return -1 end
    return deadline_in(0, now)
  end
  local k, n = redis.call('ZRANK', QUEUE, m), permits(m)
  if k >= n then return -1 end
  return deadline_in(h - n + k, now)
end
-- Publishes one wake-up to every waiter that may hold now (but `skip`): the first exclusive
-- waiter, or the readers ahead of the first writer, or the first n - holders permit waiters.
local function wake_eligible(skip)
  local head = first(QUEUE)
  if not head then return end
  local h, r, out = redis.call('ZCARD', HOLDERS), role(head), {}
  if r == 'X' then
    if h == 0 then out = {head} end
  elseif r == 'S' then
    if not exclusive_held(h) then
      local x, xs = first_writer()
      if x then
        out = redis.call('ZRANGEBYSCORE', QUEUE, '-inf', '(' .. xs)
      else
        out = redis.call('ZRANGE', QUEUE, 0, -1)
      end
    end
  else
    local free = (permits(head) or 0) - h
    if free > 0 then out = redis.call('ZRANGE', QUEUE, 0, free - 1) end
  end
  for _, m in ipairs(out) do
    if m ~= skip then redis.call('PUBLISH', WAKE .. token(m), 'wake') end
  end
end
-- Joins the queue tail (if not in it) and refreshes the liveness deadline.
local function join(m, now)
  if not redis.call('ZSCORE', QUEUE, m) then
    local last = redis.call('ZRANGE', QUEUE, -1, -1, 'WITHSCORES')
    local score = now
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
    redis.call('ZADD', QUEUE, string.format('%d', score), m)
    if role(m) == 'X' then redis.call('ZADD', WRITERS, string.format('%d', score), m) end
  end
  redis.call('ZADD', ALIVE, string.format('%d', now + WTTL), m)
  keep(QUEUE, ALIVE, 2 * WTTL)
  keep(QUEUE, WRITERS, 2 * WTTL)
end
-- Makes m a holder until now + TTL and returns its fencing token (`counter`: the fencing
-- counter's value as `GET` answered, false when absent; see next_fence).
local function grant(m, now, counter)
  local f, s = next_fence(FENCE, counter, TTL, FLOOR)
  redis.call('ZADD', HOLDERS, string.format('%d', now + TTL), m)
  redis.call('HSET', INFO, m, s .. ':' .. VALUE)
  if (tonumber(redis.call('HGET', INFO, '~ttl')) or 0) < TTL then redis.call('HSET', INFO, '~ttl', TTL) end
  keep(HOLDERS, INFO, TTL)
  announce(m)
  return f
end
