-- Mutex: a waiter's one step: joins the queue (at the tail) if not in it, refreshes its liveness
-- deadline, and takes the lock if it is free and this waiter is the live head (and the server has
-- not just lost its data, and no gap for polling clients is running: then the head waits).
-- Idempotent like try_acquire.lua.
-- Settings: FLOOR, DELAY, GAP (constants written before the script, see LockScripts).
-- KEYS: lock, fence, queue, alive (and streak, gap with poller_gap).
-- ARGV: token, ttl ms, wake prefix, waiter ttl ms.
-- The waiter's liveness deadline and its lease's TTL are kept in hash alive (fields <token> and
-- <token>/ttl): a release hands the lock straight to a live head with both (release.lua).
-- Reply: {1, fence} or {0, is_head, ms until it may be free, holder_is_foreign, the deadline
-- (server ms) this step gave the waiter}.

local t = redis.call('TIME') -- once: ms for the queue's deadlines, microseconds for the token
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local tok, wttl = ARGV[1], tonumber(ARGV[4])
local v = redis.call('GET', KEYS[1])
-- Already ours: the lease starts again now (see try_acquire.lua).
if mine(v, tok) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence_of(v)}
end
local queued = redis.call('ZSCORE', KEYS[3], tok)
if not queued then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local score = now
  if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[3], score, tok)
end
-- A head's liveness is bounded by three of our waiter TTLs (see head): waiters refresh every third
-- of theirs, so only a client with a waiter TTL nine times ours could be cut short, and then it
-- only rejoins at the tail. This waiter is live (it is calling): head does not look it up, and its
-- own deadline is refreshed below only if it stays in the queue.
local h, pruned = head(KEYS[3], KEYS[4], now, now + 3 * wttl, tok)
local wait = nil
if not v and h == tok then
  local counter = redis.call('GET', KEYS[2])
  wait = math.max(data_loss_wait(counter, DELAY, KEYS[2]), gap_left(KEYS[6], GAP))
  if wait == 0 then
    if queued then unqueue(KEYS[3], KEYS[4], tok) else redis.call('ZREM', KEYS[3], tok) end
    streak_on(KEYS[5], GAP, ARGV[2])
    local f = take(KEYS[1], KEYS[2], counter, tok, ARGV[2], FLOOR, now_us)
    -- The next live waiter is first now: woken, its step watches this holder's lease.
    wake(ARGV[3], (head(KEYS[3], KEYS[4], now)))
    return {1, f}
  end
end
redis.call('HSET', KEYS[4], tok, now + wttl, tok .. '/ttl', ARGV[2])
if pruned and h ~= tok then wake(ARGV[3], h) end
if redis.call('PTTL', KEYS[3]) < 2 * wttl then
  redis.call('PEXPIRE', KEYS[3], 2 * wttl)
  redis.call('PEXPIRE', KEYS[4], 2 * wttl)
end
local foreign = 0
if v then
  local t = string.match(v, '^(%x+):%d+:%d+$') or string.match(v, '^(%x+):%d+$')
  if not t or #t ~= 32 then foreign = 1 end
end
return {0, h == tok and 1 or 0, wait or bounded_pttl(KEYS[1], v), foreign, now + wttl}
