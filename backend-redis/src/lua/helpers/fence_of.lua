-- Helper fence_of(v): the fencing token (a number) of a locksmith lock value v.
-- The value is '<token>:<fence>:<ttl ms>' ('<token>:<fence>' when an older version wrote it): the
-- first number after the token.
local function fence_of(v)
  return tonumber(string.match(v, '^[^:]*:(%d+)'))
end
