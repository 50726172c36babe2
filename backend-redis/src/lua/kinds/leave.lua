-- Kinds: clean-up of a cancelled or failed acquire: leaves the queue, gives back a grant that never
-- reached the caller, and wakes every waiter that may hold now. A candidate leaving an election's
-- queue is announced on the leader channel (observers count it as the coming leader while nobody
-- leads).
-- KEYS and ARGV: those of state.lua.
-- Reply: 1 if a grant was given back, 0 otherwise.

local now = now_ms()
local changed, released = false, 0
if redis.call('ZSCORE', QUEUE, ME) or redis.call('ZSCORE', ALIVE, ME) then
  drop_waiter(ME)
  -- An election's observers count a queued candidate as the coming leader: tell them it left.
  announce(ME)
  changed = true
end
if redis.call('ZSCORE', HOLDERS, ME) then
  if holding(ME, now) then released = 1 end
  unhold(ME)
  changed = true
end
changed = prune(now) or changed
if changed then wake_eligible(nil) end
return released
