-- Helper bounded_pttl(lock, v): the PTTL of mutex key lock, whose value (as GET answered) is v,
-- after bounding it by the TTL its holder was granted ('<token>:<fence>:<ttl ms>'): a key that
-- has more time left than its lease ever had (the server's clock stepped back: Redis keeps
-- absolute expiry times, so every key gains the step) is cut back to that TTL from now. A live
-- holder loses nothing it believes in (it renewed at most one TTL ago, and its next renewal sets
-- the TTL again); a dead holder's lock expires one TTL after a contender saw it, not an hour.
-- Values without a TTL (another client's, an older version's) are left as they are.
local function bounded_pttl(lock, v)
  local p = redis.call('PTTL', lock)
  local granted = v and tonumber(string.match(v, '^%x+:%d+:(%d+)$'))
  if granted and p > granted then
    redis.call('PEXPIRE', lock, granted)
    return granted
  end
  return p
end
