-- Helper permits(m): the permit count n of semaphore entry m ('P<n>:<token>'), nil for other roles.
local function permits(m) return tonumber(string.match(m, '^P(%d+):')) end
