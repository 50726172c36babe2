-- Kinds: a waiter's one step: joins the queue (at the tail) if not in it, refreshes its liveness,
-- and takes the lock if the rule lets it hold (leaving the queue). Idempotent like try_acquire.lua.
-- KEYS and ARGV: those of state.lua.
-- Reply: {1, fence}, {0, ms until the holder deadline it waits for, or -1}, or {-1, the
-- semaphore's permits} (the entry is not queued then).

local now = now_ms()
if holding(ME, now) then return {1, held_again(ME, now)} end
local changed = prune(now)
local other = mismatch(ME)
if other then
  if redis.call('ZSCORE', QUEUE, ME) then
    drop_waiter(ME)
    changed = true
  end
  if changed then wake_eligible(ME) end
  return {-1, other}
end
join(ME, now)
local h = redis.call('ZCARD', HOLDERS)
local result
if may_hold(ME, h) then
  local counter = redis.call('GET', FENCE)
  local w = data_loss_wait(counter, DELAY, FENCE)
  if w == 0 then
    drop_waiter(ME)
    result = {1, grant(ME, now, counter)}
  else
    result = {0, w}
  end
else
  result = {0, depends_on(ME, h, now)}
end
if changed then wake_eligible(ME) end
return result
