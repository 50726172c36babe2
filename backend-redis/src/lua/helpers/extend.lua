-- Helper extend(set, info, m, ttl, now): renews holder m (sorted set `set`, holder data hash `info`;
-- ttl and now in ms). Returns 1 if extended, 0 if m no longer holds.
-- Extends holder m of `set` to now + ttl if it still holds; 1 if so.
local function extend(set, info, m, ttl, now)
  local s = redis.call('ZSCORE', set, m)
  if not s or tonumber(s) <= now then return 0 end
  redis.call('ZADD', set, 'XX', string.format('%d', now + ttl), m)
  keep(set, info, ttl)
  return 1
end
