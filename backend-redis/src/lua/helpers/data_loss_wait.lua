-- Helper data_loss_wait(counter, delay): ms the lock must stay free after a possible data loss
-- (counter: the fencing counter as GET answered; delay: the restart delay in ms).
-- How many ms a free lock must stay free because the server may have lost its data (restarted
-- without persistence, or flushed) less than `delay` ms ago: a lease granted before the loss may
-- still be believed held by its holder. 0 once the server has been up for `delay`, or when the
-- lock's fencing counter survived (the data was not lost). `counter`: the counter's value, as
-- `GET` of the fence key answered (false when it is absent).
local function data_loss_wait(counter, delay)
  if delay <= 0 or counter then return 0 end
  local up = string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')
  if not up then
    error('locksmith: INFO server shows no uptime_in_seconds; set restart_delay=0')
  end
  return math.max(0, delay - tonumber(up) * 1000)
end
