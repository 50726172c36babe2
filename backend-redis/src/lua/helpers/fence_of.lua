-- Helper fence_of(v): the fencing token (a number) of a locksmith lock value v.
-- The fencing token stored in a locksmith lock value.
local function fence_of(v)
  return tonumber(string.match(v, ':(%d+)$'))
end
