-- Helper streak_on(streak, gap, ttl): poller_gap bookkeeping of a take (key streak; gap in ms, 0:
-- off; ttl: the lease's ms). Returns nothing.
-- A take in a streak of locksmith holders: starts the streak, or keeps its start.
local function streak_on(streak, gap, ttl)
  if gap <= 0 then return end
  if redis.call('EXISTS', streak) == 0 then redis.call('SET', streak, now_ms()) end
  redis.call('PEXPIRE', streak, tonumber(ttl) + gap)
end
