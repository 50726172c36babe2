-- Mutex: read-only look for inspect.
-- KEYS: lock, queue, alive.
-- ARGV: none.
-- Reply: {value or false, pttl, live waiters}.

local now = now_ms()
local live = 0
local all = redis.call('HGETALL', KEYS[3])
for i = 2, #all, 2 do
  if tonumber(all[i]) > now and redis.call('ZSCORE', KEYS[2], all[i - 1]) then live = live + 1 end
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), live}
