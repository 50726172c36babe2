-- Helper head(queue, alive, now): the mutex queue's first waiter whose liveness deadline (in hash
-- alive) is after now (ms), dropping the stale ones in front of it. Returns that waiter's token
-- (nil if none) and whether any entry was dropped.
local function head(queue, alive, now)
  local pruned = false
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then return nil, pruned end
    local d = tonumber(redis.call('HGET', alive, h))
    if d and d > now then return h, pruned end
    redis.call('ZREM', queue, h)
    redis.call('HDEL', alive, h)
    pruned = true
  end
end
