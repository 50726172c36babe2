-- Helper streak_off(streak, gapkey, gap, max): poller_gap bookkeeping of a release (keys streak and
-- gapkey; gap and max in ms, gap 0: off). Returns nothing.
-- A release: after `max` ms of locksmith holders without a break, leave the lock free for `gap`
-- ms (a polling client gets its chance); otherwise the streak ends unless taken within `gap`.
local function streak_off(streak, gapkey, gap, max)
  if gap <= 0 then return end
  local s = tonumber(redis.call('GET', streak))
  if s and now_ms() - s >= max then
    redis.call('DEL', streak)
    redis.call('SET', gapkey, 1, 'PX', gap)
  else
    redis.call('PEXPIRE', streak, gap)
  end
end
