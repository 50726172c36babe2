-- Header of renew_many.lua (the plain script): leases in KEYS and ARGV.
-- KEYS: the lock keys, one per lease (a key may repeat).
-- ARGV: for lease i, its token at 2i - 1 and its TTL in ms at 2i.

local LEASES = #KEYS
local function lease(i) return KEYS[i], ARGV[2 * i - 1], ARGV[2 * i] end
