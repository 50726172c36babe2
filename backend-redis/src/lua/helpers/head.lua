-- Helper head(queue, alive, now, cap, me, span): the mutex queue's first waiter whose liveness deadline
-- (in hash alive) is after now (ms; nil: the clock is read when a deadline is first compared),
-- dropping the stale ones in front of it. Returns that waiter's token (nil if none), whether any
-- entry was dropped, and the waiter's deadline (nil for `me`). Waiter `me` (optional: the caller,
-- live since it is calling) is not looked up.
-- With `cap` (ms, server time), a head whose deadline is later than that is given `cap` instead: a
-- deadline further ahead than any waiter asks for means the server's clock stepped back, and a
-- waiter that died would keep its place (and the lock from everyone behind it) for the whole step.
-- A live waiter refreshes long before `cap`. `span` (ms; without `cap`) makes `cap` now + span,
-- with the clock read only if a deadline is compared.
local function head(queue, alive, now, cap, me, span)
  local pruned = false
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h or h == me then return h, pruned end
    now = now or now_ms()
    if span and not cap then cap = now + span end
    local d = tonumber(redis.call('HGET', alive, h))
    if d and d > now then
      if cap and d > cap then
        redis.call('HSET', alive, h, cap)
        d = cap
      end
      return h, pruned, d
    end
    unqueue(queue, alive, h)
    pruned = true
  end
end
