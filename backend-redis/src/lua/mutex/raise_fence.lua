-- Mutex, quorum mode: raises the fencing counter to the token chosen for the lease, if we hold the
-- lock.
-- KEYS: lock, fence.
-- ARGV: token, fencing token.
-- Reply: 1 if held, 0 otherwise.

if not mine(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
  -- The token may come from another master's clock, ahead of this one.
  outlive_clock(KEYS[2], tonumber(ARGV[2]))
end
return 1
