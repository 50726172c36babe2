-- Helper take(lock, fence, counter, tok, ttl, floor): grants mutex key lock to tok; returns the
-- fencing token (a number).
-- SET the lock to '<token>:<fence>:<ttl>' for `ttl` ms (as a string) and return the next fencing
-- token (see next_fence). The TTL in the value lets a contender bound a key that outlived it
-- (bounded_pttl).
local function take(lock, fence, counter, tok, ttl, floor)
  local f, s = next_fence(fence, counter, ttl, floor)
  redis.call('SET', lock, tok .. ':' .. s .. ':' .. ttl, 'PX', ttl)
  return f
end
