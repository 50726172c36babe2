-- Mutex: clean-up of a cancelled or failed acquire: leaves the queue, releases the lock if it was
-- granted but never handed to the caller, and if this waiter was first wakes the new head (which
-- takes a free lock, or starts watching the holder's expiry).
-- KEYS: lock, queue, alive.
-- ARGV: token, wake prefix.
-- Reply: 1 if a lock was released, 0 otherwise.

local tok = ARGV[1]
-- First among the live: stale entries in front (dead waiters nobody pruned yet) are pruned here,
-- as every step does; counting them, this waiter would leave without waking the one behind.
local first = (head(KEYS[2], KEYS[3], nil, nil, tok)) == tok
unqueue(KEYS[2], KEYS[3], tok)
local v = redis.call('GET', KEYS[1])
local released = 0
if mine(v, tok) then
  redis.call('DEL', KEYS[1])
  v, first, released = false, true, 1
end
if first then wake(ARGV[2], (head(KEYS[2], KEYS[3]))) end
return released
