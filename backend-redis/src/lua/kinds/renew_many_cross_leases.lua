-- Header of renew_many.lua for the locks of one Redis Cluster node (Redis 7.0 or later, sent with
-- the allow-cross-slot-keys flag; see mutex/renew_many_cross_leases.lua).
-- KEYS: the first lease's holders set.
-- ARGV: for lease i, its holders set at 4i - 3, holder data at 4i - 2, entry at 4i - 1, TTL in ms
-- at 4i.

local LEASES = #ARGV / 4
local function lease(i)
  return ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], tonumber(ARGV[4 * i])
end
