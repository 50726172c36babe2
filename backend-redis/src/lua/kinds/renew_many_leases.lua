-- Header of renew_many.lua (the plain script): leases in KEYS and ARGV.
-- KEYS: for lease i, its holders set at 2i - 1 and holder data at 2i.
-- ARGV: for lease i, its entry at 2i - 1 and its TTL in ms at 2i.

local LEASES = #ARGV / 2
local function lease(i) return KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], tonumber(ARGV[2 * i]) end
