-- Kinds: removes holder ME (even past its deadline), prunes, and wakes every waiter that may hold
-- now.
-- KEYS and ARGV: those of state.lua.
-- Reply: 1 if ME held (before its deadline), 0 otherwise.

local now = now_ms()
local held = holding(ME, now)
local changed = false
if redis.call('ZSCORE', HOLDERS, ME) then
  unhold(ME)
  changed = true
end
changed = prune(now) or changed
if changed then wake_eligible(nil) end
if held then return 1 end
return 0
