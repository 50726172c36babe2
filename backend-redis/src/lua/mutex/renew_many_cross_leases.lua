-- Header of renew_many.lua for the locks of one Redis Cluster node (Redis 7.0 or later, sent with
-- the allow-cross-slot-keys flag). A cluster node refuses a script whose declared keys are in
-- different slots, so only the first lock key is declared (the node checks that it serves it);
-- the script reaches the others through ARGV, which allow-cross-slot-keys permits for keys of this
-- node (another node's key is an error, and the batch is renewed again lease by lease).
-- KEYS: the first lease's lock key.
-- ARGV: for lease i, its lock key at 3i - 2, its token at 3i - 1, its TTL in ms at 3i.

local LEASES = #ARGV / 3
local function lease(i) return ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i] end
