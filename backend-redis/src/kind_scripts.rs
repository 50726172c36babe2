//! The Lua scripts of semaphores, read-write locks and elections: every state change of one of
//! these locks is one atomic script on the server, as for the mutex ([`crate::scripts`], whose
//! helpers they reuse: the server clock, the fencing counter with its floor, the data-loss wait).
//!
//! These locks may have several holders, so holders live in a sorted set rather than in one key.
//! Every holder and waiter is an *entry* `<role>:<token>`: role `X` (exclusive: a writer, a
//! candidate), `S` (shared: a reader) or `P<n>` (one permit of a semaphore of `n`). The grant rule
//! is lockcore's ([`lockcore::driver::queue`]): the holders are the front of the queue, and
//! - `X` holds when nobody holds and it is the first waiter;
//! - `S` holds when no `X` holds and no `X` waits ahead of it (the `writers` set);
//! - `P<n>` holds when fewer than `n` entries are ahead of it (holders plus waiters ahead).
//!
//! Key arguments of every lock script come in the order of [`crate::keys::KindKeys`]: `holders,
//! info, fence, queue, alive, writers`; ARGV: entry, TTL ms, fence floor, wake prefix, waiter TTL
//! ms, restart delay ms, leader channel (`''` but for elections), campaign value.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::with_helpers;

/// Helpers that need no lock keys (the renewal scripts use them too).
const HELPERS: &str = r#"
local function role(m) return string.sub(m, 1, 1) end
local function permits(m) return tonumber(string.match(m, '^P(%d+):')) end
local function token(m) return string.match(m, ':(%x+)$') end
-- Gives `a` and `b` the same expiry, at least `ms` from now: a holder's deadline or a waiter's
-- liveness never outlives the keys that record it, and the keys of one lock expire together.
local function keep(a, b, ms)
  local now_left = redis.call('PTTL', a)
  local left = math.max(now_left, ms)
  if now_left ~= left then redis.call('PEXPIRE', a, left) end
  redis.call('PEXPIRE', b, left)
end
-- Extends holder m of `set` to now + ttl if it still holds; 1 if so.
local function extend(set, info, m, ttl, now)
  local s = redis.call('ZSCORE', set, m)
  if not s or tonumber(s) <= now then return 0 end
  redis.call('ZADD', set, 'XX', string.format('%d', now + ttl), m)
  keep(set, info, ttl)
  return 1
end
"#;

/// The state of one lock and its rules; prepended to every lock script after [`HELPERS`].
const STATE: &str = r#"
local HOLDERS, INFO, FENCE, QUEUE, ALIVE, WRITERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ME, TTL, FLOOR, WAKE = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local WTTL, DELAY, LEADER, VALUE = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]

local function first(key)
  local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return r[1], r[2]
end
-- An election publishes every change of its leader (an exclusive holder coming or going).
local function announce(m)
  if LEADER ~= '' and role(m) == 'X' then redis.call('PUBLISH', LEADER, 'changed') end
end
local function unhold(m)
  redis.call('ZREM', HOLDERS, m)
  redis.call('HDEL', INFO, m)
  announce(m)
end
local function holding(m, now)
  local s = redis.call('ZSCORE', HOLDERS, m)
  return s and tonumber(s) > now
end
local function held_fence(m)
  return tonumber(string.match(redis.call('HGET', INFO, m) or '', '^(%d+)'))
end
local function drop_waiter(m)
  redis.call('ZREM', QUEUE, m)
  redis.call('ZREM', ALIVE, m)
  if role(m) == 'X' then redis.call('ZREM', WRITERS, m) end
end
-- Drops the holders past their deadline and the waiters past their liveness (1000 of each at
-- most per call); true if any.
local function prune(now)
  local t = string.format('%d', now)
  local gone = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', t, 'LIMIT', 0, 1000)
  for _, m in ipairs(gone) do unhold(m) end
  local stale = redis.call('ZRANGEBYSCORE', ALIVE, '-inf', t, 'LIMIT', 0, 1000)
  for _, m in ipairs(stale) do drop_waiter(m) end
  return #gone + #stale > 0
end
-- The first exclusive waiter and its arrival score (nil if none).
local function first_writer()
  while true do
    local x, xs = first(WRITERS)
    if not x or redis.call('ZSCORE', QUEUE, x) then return x, xs end
    redis.call('ZREM', WRITERS, x)
  end
end
local function exclusive_held(h)
  return h == 1 and role(first(HOLDERS)) == 'X'
end
-- A permit entry's count when it differs from the semaphore's other entries' (nil otherwise).
local function mismatch(m)
  local n = permits(m)
  if not n then return nil end
  local other = first(HOLDERS)
  if not other then
    other = first(QUEUE)
    if other == m then other = redis.call('ZRANGE', QUEUE, 1, 1)[1] end
  end
  local o = other and permits(other)
  if o and o ~= n then return o end
  return nil
end
-- Whether a new entry would hold at once (try_acquire).
local function holds_at_tail(m)
  local h, r = redis.call('ZCARD', HOLDERS), role(m)
  if r == 'X' then return h == 0 and redis.call('ZCARD', QUEUE) == 0 end
  if r == 'S' then return not exclusive_held(h) and first_writer() == nil end
  return h + redis.call('ZCARD', QUEUE) < permits(m)
end
-- Whether queued entry m may hold now.
local function may_hold(m, h)
  local r = role(m)
  if r == 'X' then return h == 0 and first(QUEUE) == m end
  if r == 'S' then
    if exclusive_held(h) then return false end
    local x, xs = first_writer()
    return not x or tonumber(xs) > tonumber(redis.call('ZSCORE', QUEUE, m))
  end
  return h + redis.call('ZRANK', QUEUE, m) < permits(m)
end
-- ms until the deadline of holder `index` (by deadline), -1 if none.
local function deadline_in(index, now)
  local r = redis.call('ZRANGE', HOLDERS, index, index, 'WITHSCORES')
  if not r[2] then return -1 end
  return math.max(0, tonumber(r[2]) - now)
end
-- For a waiter that may not hold: ms until the holder deadline it waits for (an expiry publishes
-- nothing), or -1 when it waits for a wake-up only (someone ahead of it watches the holders).
local function depends_on(m, h, now)
  local r = role(m)
  if r == 'X' then
    if first(QUEUE) ~= m then return -1 end
    return deadline_in(-1, now)
  end
  if r == 'S' then
    local x, xs = first_writer()
    if x and tonumber(xs) < tonumber(redis.call('ZSCORE', QUEUE, m)) then return -1 end
    return deadline_in(0, now)
  end
  local k, n = redis.call('ZRANK', QUEUE, m), permits(m)
  if k >= n then return -1 end
  return deadline_in(h - n + k, now)
end
-- Publishes one wake-up to every waiter that may hold now (but `skip`): the first exclusive
-- waiter, or the readers ahead of the first writer, or the first n - holders permit waiters.
local function wake_eligible(skip)
  local head = first(QUEUE)
  if not head then return end
  local h, r, out = redis.call('ZCARD', HOLDERS), role(head), {}
  if r == 'X' then
    if h == 0 then out = {head} end
  elseif r == 'S' then
    if not exclusive_held(h) then
      local x, xs = first_writer()
      if x then
        out = redis.call('ZRANGEBYSCORE', QUEUE, '-inf', '(' .. xs)
      else
        out = redis.call('ZRANGE', QUEUE, 0, -1)
      end
    end
  else
    local free = (permits(head) or 0) - h
    if free > 0 then out = redis.call('ZRANGE', QUEUE, 0, free - 1) end
  end
  for _, m in ipairs(out) do
    if m ~= skip then redis.call('PUBLISH', WAKE .. token(m), 'wake') end
  end
end
-- Joins the queue tail (if not in it) and refreshes the liveness deadline.
local function join(m, now)
  if not redis.call('ZSCORE', QUEUE, m) then
    local last = redis.call('ZRANGE', QUEUE, -1, -1, 'WITHSCORES')
    local score = now
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
    redis.call('ZADD', QUEUE, string.format('%d', score), m)
    if role(m) == 'X' then redis.call('ZADD', WRITERS, string.format('%d', score), m) end
  end
  redis.call('ZADD', ALIVE, string.format('%d', now + WTTL), m)
  keep(QUEUE, ALIVE, 2 * WTTL)
  keep(QUEUE, WRITERS, 2 * WTTL)
end
-- Makes m a holder until now + TTL and returns its fencing token (`counter`: the fencing
-- counter's value as `GET` answered, false when absent; see next_fence).
local function grant(m, now, counter)
  local f, s = next_fence(FENCE, counter, TTL, FLOOR)
  redis.call('ZADD', HOLDERS, string.format('%d', now + TTL), m)
  redis.call('HSET', INFO, m, s .. ':' .. VALUE)
  keep(HOLDERS, INFO, TTL)
  announce(m)
  return f
end
"#;

/// One attempt, never queueing: prunes, then grants if the entry would hold at the tail of the
/// queue (and the server has not just lost its data). Idempotent: a retry finds the entry
/// holding and answers its token. Wakes the waiters that pruning let in.
/// Returns `{1, fence}`, `{0, ms to wait (data loss) or 0}`, or `{-1, the semaphore's permits}`.
const TRY_ACQUIRE: &str = r#"
local now = now_ms()
if holding(ME, now) then return {1, held_fence(ME)} end
local changed = prune(now)
local other = mismatch(ME)
local result = {0, 0}
if other then
  result = {-1, other}
elseif holds_at_tail(ME) then
  local counter = redis.call('GET', FENCE)
  local w = data_loss_wait(counter, DELAY)
  if w == 0 then result = {1, grant(ME, now, counter)} else result = {0, w} end
end
if changed then wake_eligible(ME) end
return result
"#;

/// A waiter's one step: joins the queue (at the tail) if not in it, refreshes its liveness, and
/// takes the lock if the rule lets it hold (leaving the queue). Idempotent like `TRY_ACQUIRE`.
/// Returns `{1, fence}`, `{0, ms until the holder deadline it waits for, or -1}`, or `{-1, the
/// semaphore's permits}` (the entry is not queued then).
const WAIT_STEP: &str = r#"
local now = now_ms()
if holding(ME, now) then return {1, held_fence(ME)} end
local changed = prune(now)
local other = mismatch(ME)
if other then
  if redis.call('ZSCORE', QUEUE, ME) then
    drop_waiter(ME)
    changed = true
  end
  if changed then wake_eligible(ME) end
  return {-1, other}
end
join(ME, now)
local h = redis.call('ZCARD', HOLDERS)
local result
if may_hold(ME, h) then
  local counter = redis.call('GET', FENCE)
  local w = data_loss_wait(counter, DELAY)
  if w == 0 then
    drop_waiter(ME)
    result = {1, grant(ME, now, counter)}
  else
    result = {0, w}
  end
else
  result = {0, depends_on(ME, h, now)}
end
if changed then wake_eligible(ME) end
return result
"#;

/// Removes holder ME (even past its deadline), prunes, and wakes every waiter that may hold now.
/// Returns 1 if ME held (before its deadline), 0 otherwise.
const RELEASE: &str = r#"
local now = now_ms()
local held = holding(ME, now)
local changed = false
if redis.call('ZSCORE', HOLDERS, ME) then
  unhold(ME)
  changed = true
end
changed = prune(now) or changed
if changed then wake_eligible(nil) end
if held then return 1 end
return 0
"#;

/// Clean-up of a cancelled or failed acquire: leaves the queue, gives back a grant that never
/// reached the caller, and wakes every waiter that may hold now. A candidate leaving an election's
/// queue is announced on the leader channel (observers count it as the coming leader while nobody
/// leads; see [`crate::election`]). Returns 1 if a grant was given back.
const LEAVE: &str = r#"
local now = now_ms()
local changed, released = false, 0
if redis.call('ZSCORE', QUEUE, ME) or redis.call('ZSCORE', ALIVE, ME) then
  drop_waiter(ME)
  -- An election's observers count a queued candidate as the coming leader: tell them it left.
  announce(ME)
  changed = true
end
if redis.call('ZSCORE', HOLDERS, ME) then
  if holding(ME, now) then released = 1 end
  unhold(ME)
  changed = true
end
changed = prune(now) or changed
if changed then wake_eligible(nil) end
return released
"#;

/// The watchdog's batch for these kinds: extends each holder's deadline to now + its TTL, if it
/// still holds. KEYS: for lease `i`, its holders set at `2i - 1` and holder data at `2i`. ARGV:
/// its entry at `2i - 1`, its TTL in ms at `2i`. Returns one flag per lease (1: extended).
const RENEW_MANY: &str = r#"
local now = now_ms()
local out = {}
for i = 1, #ARGV / 2 do
  out[i] = extend(KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], tonumber(ARGV[2 * i]), now)
end
return out
"#;

/// `RENEW_MANY` for the locks of one Redis Cluster node (see the mutex's `RENEW_MANY_CROSS`):
/// KEYS: the first lease's holders set. ARGV: for lease `i`, its holders set at `4i - 3`, holder
/// data at `4i - 2`, entry at `4i - 1`, TTL in ms at `4i`.
const RENEW_MANY_CROSS: &str = r#"
local now = now_ms()
local out = {}
for i = 1, #ARGV / 4 do
  out[i] = extend(ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], tonumber(ARGV[4 * i]), now)
end
return out
"#;

/// Read-only: the exclusive holder of an election. KEYS: holders, info, alive.
/// Returns `{entry, '<fence>:<value>', ms until its deadline}`; when nobody leads, `{ms}` if a
/// candidate that is still alive waits in line (it is about to lead: the grant publishes), ms
/// until the first such liveness deadline; `{}` if nobody waits either.
const LEADER: &str = r#"
local now = now_ms()
local t = '(' .. string.format('%d', now)
local r = redis.call('ZRANGEBYSCORE', KEYS[1], t, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if r[1] then return {r[1], redis.call('HGET', KEYS[2], r[1]) or '', tonumber(r[2]) - now} end
local w = redis.call('ZRANGEBYSCORE', KEYS[3], t, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if w[1] then return {tonumber(w[2]) - now} end
return {}
"#;

fn lock_script(body: &str) -> String {
    with_helpers(&format!("{HELPERS}{STATE}{body}"))
}

/// The compiled scripts of the kinds other than the mutex.
pub(crate) struct KindScripts {
    pub(crate) try_acquire: Script,
    pub(crate) wait_step: Script,
    pub(crate) release: Script,
    pub(crate) leave: Script,
    pub(crate) renew_many: Script,
    /// `RENEW_MANY_CROSS`: `RENEW_MANY` for the locks of one Redis Cluster node (Redis 7).
    pub(crate) renew_many_cross: Script,
    pub(crate) leader: Script,
    /// The source of every script but `renew_many_cross`, for `SCRIPT LOAD` at connect.
    pub(crate) sources: Vec<String>,
}

/// The one instance.
pub(crate) static KIND_SCRIPTS: LazyLock<KindScripts> = LazyLock::new(|| {
    let mut sources: Vec<String> = [TRY_ACQUIRE, WAIT_STEP, RELEASE, LEAVE]
        .iter()
        .map(|b| lock_script(b))
        .collect();
    sources.push(with_helpers(&format!("{HELPERS}{RENEW_MANY}")));
    sources.push(with_helpers(LEADER));
    let s = |i: usize| Script::new(&sources[i]);
    KindScripts {
        try_acquire: s(0),
        wait_step: s(1),
        release: s(2),
        leave: s(3),
        renew_many: s(4),
        leader: s(5),
        renew_many_cross: Script::new(&format!(
            "#!lua flags=allow-cross-slot-keys\n{}",
            with_helpers(&format!("{HELPERS}{RENEW_MANY_CROSS}"))
        )),
        sources,
    }
});
