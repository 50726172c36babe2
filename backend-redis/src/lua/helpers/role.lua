-- Helper role(m): the role of kind entry m ('<role>:<token>'): its first letter, 'X', 'S' or 'P'.
local function role(m) return string.sub(m, 1, 1) end
