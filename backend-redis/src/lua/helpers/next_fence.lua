-- Helper next_fence(fence, counter, ttl, floor, us): raises fencing counter key fence; returns the
-- new token as a number and as a string (us: the server clock in microseconds if the caller read
-- it already; nil: read here).
-- The next fencing token of a lock, stored in its counter and returned as a number and as its
-- decimal string: above the counter (`counter`: its value as `GET` answered, false when absent),
-- and at least the floor ('time': the server clock in microseconds; a number; '': none). With
-- the time floor the counter is only a tie-breaker: it is created to expire an hour after the
-- lease's TTL and keeps that expiry when raised, so a lock taken for more than an hour finds it
-- gone now and then and starts it again at the clock, above every earlier token (a counter ahead
-- of the clock is kept until the clock has passed it: `outlive_clock`). Without it the
-- counter is all there is: raised, it loses any expiry a client with the time floor gave it
-- (clients of one lock with different floors, or a floor changed), which would otherwise let it
-- expire and start again below earlier tokens.
local function next_fence(fence, counter, ttl, floor, us)
  local f = (tonumber(counter) or 0) + 1
  if floor == 'time' then
    if not us then
      local t = redis.call('TIME')
      us = t[1] * 1000000 + t[2]
    end
    f = math.max(f, us)
  elseif floor ~= '' then
    f = math.max(f, tonumber(floor))
  end
  -- %d: a token above 2^47 would print in exponent notation by default.
  local s = string.format('%d', f)
  if counter and floor == 'time' then
    redis.call('SET', fence, s, 'KEEPTTL')
    if f > us then outlive_clock(fence, f, us) end
  elseif floor == 'time' then
    redis.call('SET', fence, s, 'PX', ttl + 3600000)
  else
    redis.call('SET', fence, s)
  end
  return f, s
end
