-- main.lua -- the driver: decides every item of one call all-or-nothing.
-- KEYS[i]: the Redis key of item i (all in one slot; the same key may repeat: later
--   items see the earlier ones' new state, as in the memory store).
-- ARGV[1] op: 'd' decide (check all, then write all only if all admit), 's' settle
--   (cost = signed delta, always written), 'l' release (concurrency), 'x' reset (the
--   keys are deleted: SL.RESET), 'c' claim (KEYS[1] is a settle/release token's claim,
--   set if absent for item 1's cost in ms: the token's single use across instances).
-- ARGV[2] time: 'r' = redis.call('TIME') (needs effects replication, the default since
--   Redis 5), 'c' = the caller's ARGV[3..6]: mono_s mono_n wall_s wall_n.
-- ARGV[7] extra ms of expiry beyond the moment a key is back to fresh.
-- ARGV[8 + 6*(i-1) ..]: item i: algo id, cost, p1..p4 (see each algorithm's file).
-- Reply: {all_ok, time_s, time_n, ok_1 .. ok_n, before_1 .. before_n}: before_i is the
--   stored state before the call ("" when absent or when the key repeats an earlier one);
--   the caller computes remaining/reset/retry-after from it with the C algorithms.
local op = ARGV[1]
local now
if ARGV[2] == 'r' then
  local t = redis.call('TIME')
  local s, n = tonumber(t[1]), tonumber(t[2]) * 1000
  now = {ms = s, mn = n, ws = s, wn = n}
else
  now = {ms = tonumber(ARGV[3]), mn = tonumber(ARGV[4]),
         ws = tonumber(ARGV[5]), wn = tonumber(ARGV[6])}
end
local slack = tonumber(ARGV[7])
local n = #KEYS
if op == 'c' then
  local ok = redis.call('SET', KEYS[1], '1', 'NX', 'PX', tonumber(ARGV[9])) and 1 or 0
  return {ok, now.ms, now.mn, ok, ''}
end
if op == 'x' then
  local out = {1, now.ms, now.mn}
  for i = 1, n do
    redis.call('DEL', KEYS[i])
    out[3 + i] = 1
    out[3 + n + i] = ''
  end
  return out
end
local cache, dirty, order = {}, {}, {}
local all = 1
local out = {0, now.ms, now.mn}
local before = {}
for i = 1, n do
  local k = KEYS[i]
  local st = cache[k]
  if st == nil then
    local raw = redis.call('GET', k)
    before[i] = raw or ''
    st = false
    if raw then
      st = {}
      for v in string.gmatch(raw, '%S+') do st[#st + 1] = tonumber(v) end
    end
  else
    before[i] = ''
  end
  local b = 8 + (i - 1) * 6
  local algo = tonumber(ARGV[b])
  local f = ALGO[algo]
  if f == nil then return redis.error_reply('ERR sluice: unknown algorithm') end
  local p = {tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]),
             tonumber(ARGV[b + 5])}
  local ok, ns, ttl = f(st or nil, p, tonumber(ARGV[b + 1]), now, op)
  out[3 + i] = ok and 1 or 0
  if not ok then all = 0 end
  if ns then
    cache[k] = ns
    if dirty[k] == nil then order[#order + 1] = k end
    dirty[k] = {ns, ttl}
  else
    cache[k] = st
  end
end
if all == 1 or op ~= 'd' then
  for _, k in ipairs(order) do
    local d = dirty[k]
    local parts = {}
    for j, v in ipairs(d[1]) do parts[j] = string.format('%d', v) end
    local ms = math.floor(d[2] / 1000000) + 1 + slack
    if ms < 1 then ms = 1 end
    redis.call('SET', k, table.concat(parts, ' '), 'PX', ms)
  end
end
out[1] = all
for i = 1, n do out[3 + n + i] = before[i] end
return out
