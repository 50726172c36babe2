-- Kinds: the watchdog's batch: extends each holder's deadline to now + its TTL, if it still holds.
-- Its KEYS and ARGV are read by the header sent before it, which defines LEASES (how many) and
-- lease(i) (lease i's holders set, holder data, entry and TTL in ms, a number):
-- renew_many_leases.lua (the plain script) or renew_many_cross_leases.lua (Redis Cluster).
-- Reply: one integer per lease, in order: 1 if extended, 0 otherwise.

local now = now_ms()
local out = {}
for i = 1, LEASES do
  local set, info, entry, ttl = lease(i)
  out[i] = extend(set, info, entry, ttl, now)
end
return out
