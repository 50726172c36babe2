-- Mutex: clean-up of a cancelled or failed acquire: leaves the queue, releases the lock if it was
-- granted but never handed to the caller, and if this waiter was first wakes the new head (which
-- takes a free lock, or starts watching the holder's expiry).
-- KEYS: lock, queue, alive.
-- ARGV: token, wake prefix.
-- Reply: 1 if a lock was released, 0 otherwise.

local tok = ARGV[1]
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1] == tok
unqueue(KEYS[2], KEYS[3], tok)
local v = redis.call('GET', KEYS[1])
local released = 0
if mine(v, tok) then
  redis.call('DEL', KEYS[1])
  v, first, released = false, true, 1
end
if first then wake(ARGV[2], (head(KEYS[2], KEYS[3]))) end
return released
