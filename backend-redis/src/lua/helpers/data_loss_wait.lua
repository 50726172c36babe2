-- Helper data_loss_wait(counter, delay, fence): ms the lock must stay free after a possible data
-- loss (counter: the fencing counter as GET answered; delay: the restart delay in ms; fence: the
-- counter's key, whose name with ':restart' appended keeps the mark described below).
-- How many ms a free lock must stay free because the server may have lost its data (restarted
-- without persistence, or flushed) less than `delay` ms ago: a lease granted before the loss may
-- still be believed held by its holder. 0 once the server has been up for `delay`, or when the
-- lock's fencing counter survived (the data was not lost). `counter`: the counter's value, as
-- `GET` of the fence key answered (false when it is absent).
-- A negative uptime (the server's wall clock was stepped back past its start: a machine that
-- booted with its clock ahead, then NTP) says nothing about how long the server has really been
-- up, and is not a restart. The delay is then served once per server run (`run_id`) and lock,
-- counted from its first sight: a mark `run_id:deadline` (server ms), kept until the uptime has
-- reached the delay again, so that the uptime crossing zero does not start a second wait.
local function data_loss_wait(counter, delay, fence)
  if delay <= 0 or counter then return 0 end
  local info = redis.call('INFO', 'server')
  local up = string.match(info, 'uptime_in_seconds:(%-?%d+)')
  if not up then
    error('locksmith: INFO server shows no uptime_in_seconds; set restart_delay=0')
  end
  up = tonumber(up) * 1000
  if up >= delay then return 0 end
  local run = string.match(info, 'run_id:(%x+)') or ''
  local mark = fence .. ':restart'
  local seen = redis.call('GET', mark)
  local now = now_ms()
  if seen then
    local r, deadline = string.match(seen, '^(%x*):(%d+)$')
    if r == run and deadline then return math.max(0, tonumber(deadline) - now) end
  end
  if up >= 0 then return delay - up end
  redis.call('SET', mark, run .. ':' .. (now + delay), 'PX', delay - up)
  return delay
end
