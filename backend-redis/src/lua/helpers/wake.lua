-- Helper wake(chan, h): publishes 'wake' on the wake channel of waiter h (prefix chan), if there
-- is one (h not nil). Returns nothing.
local function wake(chan, h)
  if h then redis.call('PUBLISH', chan .. h, 'wake') end
end
