-- Helper unqueue(queue, alive, tok): removes waiter tok from the mutex queue, with its two fields
-- of hash alive: its liveness deadline (<tok>) and its lease's TTL (<tok>/ttl, see wait_step.lua).
-- Returns nothing.
local function unqueue(queue, alive, tok)
  redis.call('ZREM', queue, tok)
  redis.call('HDEL', alive, tok, tok .. '/ttl')
end
