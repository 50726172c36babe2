-- Mutex: one attempt, never queueing: takes the lock if it is free and nobody live is queued before
-- us. Stale heads it drops are replaced by the next live waiter, which is woken. Idempotent: a retry
-- of a call whose answer was lost finds the lock already ours. The uncontended case (no lock key,
-- no queue key) is EXISTS, GET (the counter), TIME, SET (the counter) and SET (the lock).
-- Settings: FLOOR, DELAY, GAP (constants written before the script, see LockScripts).
-- KEYS: lock, fence, queue, alive (and streak, gap with poller_gap).
-- ARGV: token, ttl ms, wake prefix (and the waiter TTL ms: a queued head's liveness deadline is
-- then bounded by three of them, as a waiter's step bounds it, see head).
-- Reply: {1, fence} or {0, ms until it may be free: the holder's pttl (bounded by its granted TTL,
-- see bounded_pttl), or a wait}.

if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local counter = redis.call('GET', KEYS[2])
  local w = math.max(data_loss_wait(counter, DELAY, KEYS[2]), gap_left(KEYS[6], GAP))
  if w > 0 then return {0, w} end
  streak_on(KEYS[5], GAP, ARGV[2])
  return {1, take(KEYS[1], KEYS[2], counter, ARGV[1], ARGV[2], FLOOR)}
end
local v = redis.call('GET', KEYS[1])
-- Already ours (a retry, or a grant that was not confirmed in time): the lease starts again now,
-- as the caller counts it from this call; the PEXPIRE is also the write a WAIT then confirms.
if mine(v, ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence_of(v)}
end
-- A waiter that died with its deadline set on a clock since stepped back would otherwise keep its
-- place from contenders that only try for the whole step.
local wttl = tonumber(ARGV[4])
local h, pruned = head(KEYS[3], KEYS[4], nil, nil, nil, wttl and 3 * wttl)
if not v and (h == nil or h == ARGV[1]) then
  local counter = redis.call('GET', KEYS[2])
  local w = math.max(data_loss_wait(counter, DELAY, KEYS[2]), gap_left(KEYS[6], GAP))
  if w > 0 then return {0, w} end
  if h then unqueue(KEYS[3], KEYS[4], h) end
  streak_on(KEYS[5], GAP, ARGV[2])
  return {1, take(KEYS[1], KEYS[2], counter, ARGV[1], ARGV[2], FLOOR)}
end
if pruned then wake(ARGV[3], h) end
return {0, bounded_pttl(KEYS[1], v)}
