-- Elections: read-only: the exclusive holder of an election.
-- KEYS: holders, info, alive.
-- ARGV: none.
-- Reply: {entry, '<fence>:<value>', ms until its deadline}; when nobody leads, {ms} if a candidate
-- that is still alive waits in line (it is about to lead: the grant publishes), ms until the first
-- such liveness deadline; {} if nobody waits either.

local now = now_ms()
local t = '(' .. string.format('%d', now)
local r = redis.call('ZRANGEBYSCORE', KEYS[1], t, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if r[1] then return {r[1], redis.call('HGET', KEYS[2], r[1]) or '', tonumber(r[2]) - now} end
local w = redis.call('ZRANGEBYSCORE', KEYS[3], t, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if w[1] then return {tonumber(w[2]) - now} end
return {}
