-- Helper gap_left(gapkey, gap): ms of poller_gap still running (key gapkey; gap in ms, 0: off).
-- Plain layout with poller_gap (gap > 0 ms): how many ms the lock is still left free for clients
-- that poll (0: none).
local function gap_left(gapkey, gap)
  if gap <= 0 then return 0 end
  return math.max(0, redis.call('PTTL', gapkey))
end
