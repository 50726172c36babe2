-- Mutex: compare-and-delete, then hand the lock to the live head of the queue (and wake the one
-- after it, first now), or wake the head. With nobody queued it is three commands: GET, DEL, ZRANGE (plus the streak
-- bookkeeping of poller_gap); the clock is read only when a waiter's deadline is compared.
--
-- The hand-over: when DIRECT is on and the head left its lease's TTL beside its liveness deadline
-- (wait_step.lua), the lock is granted to it here, as its own step would (a new fencing token, the
-- key for that TTL), and its message says so: 'grant:<fencing token>:<deadline>'. The deadline
-- is the one its last step set, so the waiter knows the grant came after that step and counts
-- the lease from when it sent it; it saves the step's round trip. Otherwise (DIRECT off, a
-- waiter of an older version, the restart delay or the poller gap running) the message is
-- 'wake' and the head's step takes the lock.
-- Settings: FLOOR, DELAY, GAP, MAX_PASS, DIRECT (constants written before the script, see
-- LockScripts).
-- KEYS: lock, fence, queue, alive (and streak, gap with poller_gap).
-- ARGV: token, wake prefix.
-- Reply: 1 if released, 0 if not ours.

if not mine(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
streak_off(KEYS[5], KEYS[6], GAP, MAX_PASS)
local h, _, d = head(KEYS[3], KEYS[4])
if not h then return 1 end
local ttl = DIRECT and redis.call('HGET', KEYS[4], h .. '/ttl')
if ttl then
  local counter = redis.call('GET', KEYS[2])
  if math.max(data_loss_wait(counter, DELAY, KEYS[2]), gap_left(KEYS[6], GAP)) == 0 then
    unqueue(KEYS[3], KEYS[4], h)
    streak_on(KEYS[5], GAP, ttl)
    local f = take(KEYS[1], KEYS[2], counter, h, ttl, FLOOR)
    redis.call('PUBLISH', ARGV[2] .. h, string.format('grant:%d:%d', f, d))
    -- The next live waiter is first now: woken, its step watches the new holder's lease (its
    -- last step told it it was not first, and nothing else would tell it when that lease ends).
    wake(ARGV[2], (head(KEYS[3], KEYS[4])))
    return 1
  end
end
wake(ARGV[2], h)
return 1
