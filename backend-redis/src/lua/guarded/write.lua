-- Guarded write: applies one write to a data key only if a lease still holds its lock, in the
-- same atomic step as the check (see guarded.rs).
-- KEYS: the holder key (a mutex's lock key; the holders sorted set of the other kinds), the data
-- key.
-- ARGV: 'm' (mutex) or 'k' (other kinds), the holder's token (mutex) or entry (other kinds), the
-- write ('put', 'del' or 'cas'), the value, for 'cas' '1' if a value is expected or '0' if the key
-- must be absent, and the expected value.
-- Reply: {-1} if the lease no longer holds (nothing written); {1} if the write applied; {0} if
-- not (nothing to delete, a value that differs).

local held
if ARGV[1] == 'm' then
  held = mine(redis.call('GET', KEYS[1]), ARGV[2])
else
  local s = redis.call('ZSCORE', KEYS[1], ARGV[2])
  held = s and tonumber(s) > now_ms()
end
if not held then return {-1} end
local write = ARGV[3]
if write == 'put' then
  redis.call('SET', KEYS[2], ARGV[4])
  return {1}
elseif write == 'del' then
  return {redis.call('DEL', KEYS[2])}
end
local now = redis.call('GET', KEYS[2])
if ARGV[5] == '0' then
  if now then return {0} end
elseif now ~= ARGV[6] then
  return {0}
end
redis.call('SET', KEYS[2], ARGV[4])
return {1}
