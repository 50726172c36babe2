-- Kinds: one attempt, never queueing: prunes, then grants if the entry would hold at the tail of
-- the queue (and the server has not just lost its data). Idempotent: a retry finds the entry
-- holding and answers its token. Wakes the waiters that pruning let in.
-- KEYS and ARGV: those of state.lua.
-- Reply: {1, fence}, {0, ms to wait (data loss) or 0}, or {-1, the semaphore's permits}.

local now = now_ms()
if holding(ME, now) then return {1, held_again(ME, now)} end
local changed = prune(now)
local other = mismatch(ME)
local result = {0, 0}
if other then
  result = {-1, other}
elseif holds_at_tail(ME) then
  local counter = redis.call('GET', FENCE)
  local w = data_loss_wait(counter, DELAY, FENCE)
  if w == 0 then result = {1, grant(ME, now, counter)} else result = {0, w} end
end
if changed then wake_eligible(ME) end
return result
