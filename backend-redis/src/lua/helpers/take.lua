-- Helper take(lock, fence, counter, tok, ttl, floor): grants mutex key lock to tok; returns the
-- fencing token (a number).
-- SET the lock for tok (for `ttl` ms, as a string) and return the next fencing token (see
-- next_fence).
local function take(lock, fence, counter, tok, ttl, floor)
  local f, s = next_fence(fence, counter, ttl, floor)
  redis.call('SET', lock, tok .. ':' .. s, 'PX', ttl)
  return f
end
