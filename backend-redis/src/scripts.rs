//! The Lua scripts: every state change of a lock is one atomic script on the server.
//!
//! Key arguments of the scripts of one lock come in the order of [`crate::LockKeys`]: `lock,
//! fence, queue, alive` (scripts that need fewer take a prefix of that list, or the ones they
//! name). `RENEW_MANY` is the exception: it takes the lock keys of many locks.

use std::sync::LazyLock;

use redis::Script;

/// Helpers shared by the scripts. Each script is sent with only the helpers it calls
/// ([`with_helpers`]): every `local function` is a closure the server builds on every call.
const PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The lock value is '<token>:<fence>' (locksmith) or any string (another client).
local function mine(v, tok)
  return v and (v == tok or string.sub(v, 1, #tok + 1) == tok .. ':')
end
-- The fencing token stored in a locksmith lock value.
local function fence_of(v)
  return tonumber(string.match(v, ':(%d+)$'))
end
-- The first live waiter, after dropping stale entries in front of it; and whether any were dropped.
local function head(queue, alive, now)
  local pruned = false
  while true do
    local h = redis.call('ZRANGE', queue, 0, 0)[1]
    if not h then return nil, pruned end
    local d = tonumber(redis.call('HGET', alive, h))
    if d and d > now then return h, pruned end
    redis.call('ZREM', queue, h)
    redis.call('HDEL', alive, h)
    pruned = true
  end
end
local function wake(chan, h)
  if h then redis.call('PUBLISH', chan .. h, 'wake') end
end
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
-- Plain layout with poller_gap (gap > 0 ms): how many ms the lock is still left free for clients
-- that poll (0: none).
local function gap_left(gapkey, gap)
  if gap <= 0 then return 0 end
  return math.max(0, redis.call('PTTL', gapkey))
end
-- A take in a streak of locksmith holders: starts the streak, or keeps its start.
local function streak_on(streak, gap, ttl)
  if gap <= 0 then return end
  if redis.call('EXISTS', streak) == 0 then redis.call('SET', streak, now_ms()) end
  redis.call('PEXPIRE', streak, tonumber(ttl) + gap)
end
-- A release: after `max` ms of locksmith holders without a break, leave the lock free for `gap`
-- ms (a polling client gets its chance); otherwise the streak ends unless taken within `gap`.
local function streak_off(streak, gapkey, gap, max)
  if gap <= 0 then return end
  local s = tonumber(redis.call('GET', streak))
  if s and now_ms() - s >= max then
    redis.call('DEL', streak)
    redis.call('SET', gapkey, 1, 'PX', gap)
  else
    redis.call('PEXPIRE', streak, gap)
  end
end
-- The next fencing token of a lock, stored in its counter and returned as a number and as its
-- decimal string: above the counter (`counter`: its value as `GET` answered, false when absent),
-- and at least the floor ('time': the server clock in microseconds; a number; '': none). With
-- the time floor the counter is only a tie-breaker: it is created to expire an hour after the
-- lease's TTL and keeps that expiry when raised, so a lock taken for more than an hour finds it
-- gone now and then and starts it again at the clock, above every earlier token.
local function next_fence(fence, counter, ttl, floor)
  local f = (tonumber(counter) or 0) + 1
  if floor == 'time' then
    local t = redis.call('TIME')
    f = math.max(f, t[1] * 1000000 + t[2])
  elseif floor ~= '' then
    f = math.max(f, tonumber(floor))
  end
  -- %d: a token above 2^47 would print in exponent notation by default.
  local s = string.format('%d', f)
  if counter then
    redis.call('SET', fence, s, 'KEEPTTL')
  elseif floor == 'time' then
    redis.call('SET', fence, s, 'PX', ttl + 3600000)
  else
    redis.call('SET', fence, s)
  end
  return f, s
end
-- SET the lock for tok (for `ttl` ms, as a string) and return the next fencing token (see
-- next_fence).
local function take(lock, fence, counter, tok, ttl, floor)
  local f, s = next_fence(fence, counter, ttl, floor)
  redis.call('SET', lock, tok .. ':' .. s, 'PX', ttl)
  return f
end
"#;

/// One attempt, never queueing: takes the lock if it is free and nobody live is queued before us.
/// Stale heads it drops are replaced by the next live waiter, which is woken. Idempotent: a retry
/// of a call whose answer was lost finds the lock already ours.
/// The uncontended case (no lock key, no queue key) is `EXISTS`, `GET` (the counter), `TIME`,
/// `SET` (the counter) and `SET` (the lock).
/// KEYS: lock, fence, queue, alive (and streak, gap with `poller_gap`). ARGV: token, ttl ms, wake
/// prefix. The settings (`FLOOR`, `DELAY`, `GAP`) are constants of the script (see [`LockScripts`]).
/// Returns `{1, fence}` or `{0, ms until it may be free: the holder's pttl, or a wait}`.
const TRY_ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local counter = redis.call('GET', KEYS[2])
  local w = math.max(data_loss_wait(counter, DELAY), gap_left(KEYS[6], GAP))
  if w > 0 then return {0, w} end
  streak_on(KEYS[5], GAP, ARGV[2])
  return {1, take(KEYS[1], KEYS[2], counter, ARGV[1], ARGV[2], FLOOR)}
end
local v = redis.call('GET', KEYS[1])
if mine(v, ARGV[1]) then return {1, fence_of(v)} end
local h, pruned = head(KEYS[3], KEYS[4], now_ms())
if not v and (h == nil or h == ARGV[1]) then
  local counter = redis.call('GET', KEYS[2])
  local w = math.max(data_loss_wait(counter, DELAY), gap_left(KEYS[6], GAP))
  if w > 0 then return {0, w} end
  if h then redis.call('ZREM', KEYS[3], h); redis.call('HDEL', KEYS[4], h) end
  streak_on(KEYS[5], GAP, ARGV[2])
  return {1, take(KEYS[1], KEYS[2], counter, ARGV[1], ARGV[2], FLOOR)}
end
if pruned then wake(ARGV[3], h) end
return {0, redis.call('PTTL', KEYS[1])}
"#;

/// A waiter's one step: joins the queue (at the tail) if not in it, refreshes its liveness
/// deadline, and takes the lock if it is free and this waiter is the live head (and the server
/// has not just lost its data, and no gap for polling clients is running: then the head waits).
/// Idempotent like `TRY_ACQUIRE`.
/// KEYS: lock, fence, queue, alive (and streak, gap with `poller_gap`). ARGV: token, ttl ms, wake
/// prefix, waiter ttl ms.
/// Returns `{1, fence}` or `{0, is_head, ms until it may be free, holder_is_foreign}`.
const WAIT_STEP: &str = r#"
local now = now_ms()
local tok, wttl = ARGV[1], tonumber(ARGV[4])
local v = redis.call('GET', KEYS[1])
if mine(v, tok) then return {1, fence_of(v)} end
if not redis.call('ZSCORE', KEYS[3], tok) then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local score = now
  if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[3], score, tok)
end
redis.call('HSET', KEYS[4], tok, now + wttl)
local h, pruned = head(KEYS[3], KEYS[4], now)
local wait = nil
if not v and h == tok then
  local counter = redis.call('GET', KEYS[2])
  wait = math.max(data_loss_wait(counter, DELAY), gap_left(KEYS[6], GAP))
  if wait == 0 then
    redis.call('ZREM', KEYS[3], tok)
    redis.call('HDEL', KEYS[4], tok)
    streak_on(KEYS[5], GAP, ARGV[2])
    return {1, take(KEYS[1], KEYS[2], counter, tok, ARGV[2], FLOOR)}
  end
end
if pruned and h ~= tok then wake(ARGV[3], h) end
if redis.call('PTTL', KEYS[3]) < 2 * wttl then
  redis.call('PEXPIRE', KEYS[3], 2 * wttl)
  redis.call('PEXPIRE', KEYS[4], 2 * wttl)
end
local foreign = 0
if v then
  local t = string.match(v, '^(%x+):%d+$')
  if not t or #t ~= 32 then foreign = 1 end
end
return {0, h == tok and 1 or 0, wait or redis.call('PTTL', KEYS[1]), foreign}
"#;

/// Compare-and-delete, then wake the live head of the queue (one PUBLISH). With nobody queued
/// it is three commands: `GET`, `DEL`, `EXISTS` (plus the streak bookkeeping of `poller_gap`).
/// KEYS: lock, queue, alive (and streak, gap with `poller_gap`). ARGV: token, wake prefix.
/// Returns 1 if released, 0 if not ours.
const RELEASE: &str = r#"
if not mine(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
streak_off(KEYS[4], KEYS[5], GAP, MAX_PASS)
if redis.call('EXISTS', KEYS[2]) == 1 then
  wake(ARGV[2], (head(KEYS[2], KEYS[3], now_ms())))
end
return 1
"#;

/// Clean-up of a cancelled or failed acquire: leaves the queue, releases the lock if it was
/// granted but never handed to the caller, and if this waiter was first wakes the new head (which
/// takes a free lock, or starts watching the holder's expiry).
/// KEYS: lock, queue, alive. ARGV: token, wake prefix. Returns 1 if a lock was released.
const LEAVE: &str = r#"
local tok = ARGV[1]
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1] == tok
redis.call('ZREM', KEYS[2], tok)
redis.call('HDEL', KEYS[3], tok)
local v = redis.call('GET', KEYS[1])
local released = 0
if mine(v, tok) then
  redis.call('DEL', KEYS[1])
  v, first, released = false, true, 1
end
if first then wake(ARGV[2], (head(KEYS[2], KEYS[3], now_ms()))) end
return released
"#;

/// Compare-and-pexpire of a whole batch of leases (the watchdog's tick), one `GET` and at most
/// one `PEXPIRE` per lease. KEYS: the lock keys, one per lease (a key may repeat). ARGV: for lease
/// `i`, its token at `2i - 1` and its TTL in ms at `2i`. Returns one integer per lease, in order:
/// 1 if extended, 0 if the key no longer holds that token.
///
/// The keys of different locks are in different hash slots: on Redis Cluster a batch holds the
/// locks of one node only, and runs as [`RENEW_MANY_CROSS`].
const RENEW_MANY: &str = r#"
local out = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  if mine(redis.call('GET', k), ARGV[2 * i - 1]) then
    redis.call('PEXPIRE', k, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"#;

/// `RENEW_MANY` for the locks of one Redis Cluster node (Redis 7.0 or later). A cluster node
/// refuses a script whose declared keys are in different slots, so only the first lock key is
/// declared (the node checks that it serves it); the script reaches the others through ARGV,
/// which `allow-cross-slot-keys` permits for keys of this node (another node's key is an error,
/// and the batch is renewed again lease by lease). KEYS: the first lease's lock key. ARGV: for
/// lease `i`, its lock key at `3i - 2`, its token at `3i - 1`, its TTL in ms at `3i`.
const RENEW_MANY_CROSS: &str = r#"
local out = {}
for i = 1, #ARGV / 3 do
  local k = ARGV[3 * i - 2]
  if mine(redis.call('GET', k), ARGV[3 * i - 1]) then
    redis.call('PEXPIRE', k, ARGV[3 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"#;

/// Quorum mode: raises the fencing counter to the token chosen for the lease, if we hold the lock.
/// KEYS: lock, fence. ARGV: token, fencing token. Returns 1 if held.
const RAISE_FENCE: &str = r#"
if not mine(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
end
return 1
"#;

/// Read-only look for `inspect`. KEYS: lock, queue, alive.
/// Returns `{value or false, pttl, live waiters}`.
const INSPECT: &str = r#"
local now = now_ms()
local live = 0
local all = redis.call('HGETALL', KEYS[3])
for i = 2, #all, 2 do
  if tonumber(all[i]) > now and redis.call('ZSCORE', KEYS[2], all[i - 1]) then live = live + 1 end
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), live}
"#;

/// The helpers of [`PRELUDE`], each with its name and source (with its comment), in their order.
static PRELUDE_HELPERS: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
    let mut helpers = Vec::new();
    let mut start = 0;
    let mut name = None;
    let mut at = 0;
    for line in PRELUDE.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("local function ") {
            name = rest.split('(').next();
        }
        at += line.len();
        if line.trim_end() == "end" {
            let name = name.take().expect("a helper ends before it begins");
            helpers.push((name, &PRELUDE[start..at]));
            start = at;
        }
    }
    helpers
});

/// `body` (a script's code, with any helpers of its own) after the helpers of [`PRELUDE`] that it
/// calls, directly or through another helper, and no others.
pub(crate) fn with_helpers(body: &str) -> String {
    let calls = |text: &str, name: &str| text.contains(&format!("{name}("));
    let mut used = vec![false; PRELUDE_HELPERS.len()];
    // A helper calls only helpers defined before it: walking back finds every one needed.
    for i in (0..PRELUDE_HELPERS.len()).rev() {
        let name = PRELUDE_HELPERS[i].0;
        used[i] =
            calls(body, name) || (i + 1..PRELUDE_HELPERS.len()).any(|j| used[j] && calls(PRELUDE_HELPERS[j].1, name));
    }
    let mut s: String = PRELUDE_HELPERS
        .iter()
        .zip(&used)
        .filter(|(_, used)| **used)
        .map(|((_, source), _)| *source)
        .collect();
    s.push_str(body);
    s
}

/// The mutex scripts of one server (`TRY_ACQUIRE`, `WAIT_STEP`, `RELEASE`, `LEAVE`), with the
/// settings of its URL written into their source as constants (`FLOOR`, `DELAY`, `GAP`,
/// `MAX_PASS`) rather than sent as arguments on every call: every key or argument of an
/// `EVALSHA` costs the server about as much as a `GET`, and these run on every acquire and
/// release. Each set of settings is a script of its own on the server (a few per application).
/// Without `poller_gap` the scripts never touch the streak and gap keys, and are not sent them.
pub(crate) struct LockScripts {
    pub(crate) try_acquire: Script,
    pub(crate) wait_step: Script,
    pub(crate) release: Script,
    pub(crate) leave: Script,
    /// How many of [`crate::keys::LockKeys::lock_script_keys`] the acquire scripts take (4, or 6
    /// with the streak and gap keys of `poller_gap`); the release scripts take two fewer.
    pub(crate) keys: usize,
    /// The source of each, for `SCRIPT LOAD` at connect.
    pub(crate) sources: Vec<String>,
}

impl LockScripts {
    /// The scripts for these settings: the fence floor argument ([`crate::FenceFloor`]: `time`,
    /// a number or empty), the restart delay, `poller_gap` and `max_pass_over` in ms.
    pub(crate) fn new(floor: &str, restart_delay_ms: u64, poller_gap_ms: u64, max_pass_over_ms: u64) -> LockScripts {
        // The floor is written as a Lua string: it is `time`, digits or nothing, never a quote.
        debug_assert!(
            floor.chars().all(|c| c.is_ascii_alphanumeric()),
            "fence floor {floor:?}"
        );
        let settings = format!(
            "local FLOOR, DELAY, GAP, MAX_PASS = '{floor}', {restart_delay_ms}, {poller_gap_ms}, {max_pass_over_ms}\n"
        );
        let sources: Vec<String> = [TRY_ACQUIRE, WAIT_STEP, RELEASE, LEAVE]
            .iter()
            .map(|body| format!("{settings}{}", with_helpers(body)))
            .collect();
        let s = |i: usize| Script::new(&sources[i]);
        LockScripts {
            try_acquire: s(0),
            wait_step: s(1),
            release: s(2),
            leave: s(3),
            keys: if poller_gap_ms > 0 { 6 } else { 4 },
            sources,
        }
    }
}

/// The scripts that take no settings (their SHA1s are computed once; a call reloads a script on
/// `NOSCRIPT`).
pub(crate) struct Scripts {
    pub(crate) renew_many: Script,
    /// `RENEW_MANY_CROSS`: `RENEW_MANY` for the locks of one Redis Cluster node.
    pub(crate) renew_many_cross: Script,
    pub(crate) raise_fence: Script,
    pub(crate) inspect: Script,
    /// The source of every script but `renew_many_cross` (which needs Redis 7), for `SCRIPT LOAD`
    /// at connect.
    pub(crate) sources: Vec<String>,
}

/// The one instance.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let sources: Vec<String> = [RENEW_MANY, RAISE_FENCE, INSPECT]
        .iter()
        .map(|b| with_helpers(b))
        .collect();
    let s = |i: usize| Script::new(&sources[i]);
    Scripts {
        renew_many: s(0),
        raise_fence: s(1),
        inspect: s(2),
        renew_many_cross: Script::new(&format!(
            "#!lua flags=allow-cross-slot-keys\n{}",
            with_helpers(RENEW_MANY_CROSS)
        )),
        sources,
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_constants_of_the_script() {
        let a = LockScripts::new("time", 15000, 0, 0);
        assert!(a.sources[0].starts_with("local FLOOR, DELAY, GAP, MAX_PASS = 'time', 15000, 0, 0\n"));
        assert_eq!(a.keys, 4);
        let b = LockScripts::new("", 0, 200, 5000);
        assert_eq!(b.keys, 6);
        assert_ne!(a.try_acquire.get_hash(), b.try_acquire.get_hash());
        // The same settings, the same scripts (one entry in the server's script cache).
        assert_eq!(
            a.release.get_hash(),
            LockScripts::new("time", 15000, 0, 0).release.get_hash()
        );
    }

    #[test]
    fn each_script_defines_the_helpers_it_calls_and_no_others() {
        let mut sources = LockScripts::new("time", 15000, 0, 0).sources;
        sources.extend(SCRIPTS.sources.iter().cloned());
        sources.extend(crate::kind_scripts::KIND_SCRIPTS.sources.iter().cloned());
        assert_eq!(PRELUDE_HELPERS.len(), PRELUDE.matches("local function ").count());
        for source in &sources {
            for (name, _) in PRELUDE_HELPERS.iter() {
                let defined = source.contains(&format!("local function {name}("));
                let called = source.matches(&format!("{name}(")).count() > usize::from(defined);
                assert_eq!(called, defined, "{name} in {source}");
            }
        }
        // The release needs neither the clock's fence nor the data-loss check.
        let release = &LockScripts::new("time", 15000, 0, 0).sources[2];
        assert!(!release.contains("next_fence") && !release.contains("data_loss_wait"));
    }

    #[test]
    fn mutex_scripts_read_no_setting_from_their_arguments() {
        for body in [TRY_ACQUIRE, WAIT_STEP, RELEASE, LEAVE] {
            for arg in ["ARGV[5]", "ARGV[6]", "ARGV[7]"] {
                assert!(!body.contains(arg), "{arg} in {body}");
            }
        }
    }
}
