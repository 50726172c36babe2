-- Helper outlive_clock(fence, value, us): keeps fencing counter key fence, just set to value, from
-- expiring before this server's clock (us: in microseconds; nil: read here) has passed value by a
-- second. A counter with the time floor expires (an hour after its lease) and starts again at the
-- clock, which must then be above every token it held; a value ahead of this clock (raised to
-- another master's token by a quorum grant, or counted on past a clock that was set back) would
-- otherwise expire first and the next token come out below it. A counter without an expiry (no
-- time floor) never expires and is left so; one that expires late enough is left alone too.
local function outlive_clock(fence, value, us)
  local pttl = redis.call('PTTL', fence)
  if pttl < 0 then return end
  if not us then
    local t = redis.call('TIME')
    us = t[1] * 1000000 + t[2]
  end
  local need = math.ceil((value - us) / 1000) + 1000
  if pttl < need then
    redis.call('PEXPIRE', fence, need)
  end
end
