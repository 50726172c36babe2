-- Mutex: compare-and-pexpire of a whole batch of leases (the watchdog's tick), one GET and at most
-- one PEXPIRE per lease. Its KEYS and ARGV are read by the header sent before it, which defines
-- LEASES (how many) and lease(i) (lease i's lock key, token and TTL in ms):
-- renew_many_leases.lua (the plain script) or renew_many_cross_leases.lua (Redis Cluster).
-- Reply: one integer per lease, in order: 1 if extended, 0 if the key no longer holds that token.

local out = {}
for i = 1, LEASES do
  local k, tok, ttl = lease(i)
  if mine(redis.call('GET', k), tok) then
    redis.call('PEXPIRE', k, ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
