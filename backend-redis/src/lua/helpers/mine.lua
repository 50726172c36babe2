-- Helper mine(v, tok): whether lock value v (as GET answered: a string, or false when absent) is
-- held by token tok. The lock value is '<token>:<fence>' (locksmith) or any string (another client).
local function mine(v, tok)
  return v and (v == tok or string.sub(v, 1, #tok + 1) == tok .. ':')
end
