-- Helper keep(a, b, ms): gives keys `a` and `b` the same expiry, at least `ms` from now: a
-- holder's deadline or a waiter's liveness never outlives the keys that record it, and the keys of
-- one lock expire together. Returns nothing.
local function keep(a, b, ms)
  local now_left = redis.call('PTTL', a)
  local left = math.max(now_left, ms)
  if now_left ~= left then redis.call('PEXPIRE', a, left) end
  redis.call('PEXPIRE', b, left)
end
