-- Mutex: compare-and-delete, then wake the live head of the queue (one PUBLISH). With nobody
-- queued it is three commands: GET, DEL, ZRANGE (plus the streak bookkeeping of poller_gap); the
-- clock is read only when a waiter's deadline is compared.
-- Settings: GAP, MAX_PASS (constants written before the script, see LockScripts).
-- KEYS: lock, queue, alive (and streak, gap with poller_gap).
-- ARGV: token, wake prefix.
-- Reply: 1 if released, 0 if not ours.

if not mine(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
streak_off(KEYS[4], KEYS[5], GAP, MAX_PASS)
wake(ARGV[2], (head(KEYS[2], KEYS[3])))
return 1
