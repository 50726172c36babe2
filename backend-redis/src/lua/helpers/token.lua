-- Helper token(m): the token of kind entry m ('<role>:<token>'), which names its wake channel.
local function token(m) return string.match(m, ':(%x+)$') end
