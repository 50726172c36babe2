-- Helper take(lock, fence, counter, tok, ttl, floor, us): grants mutex key lock to tok; returns the
-- fencing token (a number). us: the server clock in microseconds, if read already (next_fence).
-- SET the lock to '<token>:<fence>:<ttl>' for `ttl` ms (as a string) and return the next fencing
-- token (see next_fence). The TTL in the value lets a contender bound a key that outlived it
-- (bounded_pttl).
local function take(lock, fence, counter, tok, ttl, floor, us)
  local f, s = next_fence(fence, counter, ttl, floor, us)
  redis.call('SET', lock, tok .. ':' .. s .. ':' .. ttl, 'PX', ttl)
  return f
end
