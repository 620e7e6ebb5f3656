-- main.lua -- the driver: one call of a decision, with the rules of src/store/group.h.
-- KEYS[i]: the Redis key of item i (all in one slot; the same key may repeat: later
--   items see the earlier ones' new state, as in the memory store).
-- ARGV[1] op: 'd' decide, 's' settle (cost = signed delta, always written), 'l' release
--   (concurrency), 'x' reset (the keys are deleted: SL.RESET), 'c' claim (KEYS[1] is a
--   settle/release token's claim, set if absent for item 1's cost in ms: the token's
--   single use across instances).
-- ARGV[2] time: 'r' = redis.call('TIME') (needs effects replication, the default since
--   Redis 5), 'c' = the caller's ARGV[3..6]: mono_s mono_n wall_s wall_n.
-- ARGV[7] extra ms of expiry beyond the moment a key is back to fresh.
-- ARGV[8] request flags: 1 = rejected whatever the items say (an Envoy block-list rule).
-- ARGV[9 + 8*(i-1) ..]: item i: algo id, cost, group, flags, p1..p4 (see each algorithm's
--   file). group 0 = enforced (all-or-nothing), g > 0 = shadow group g (applied only when
--   group 0 admits and all of g admits); flags 1 = charged even when rejected.
-- Decide: group 0 in item order; if every item admits (and no request flag), each shadow
--   group in increasing order on the states group 0 left, kept only when it all admits;
--   otherwise nothing is kept but the charges (settled onto the stored state).
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
local rflags = tonumber(ARGV[8])
local n = #KEYS
if op == 'c' then
  local ok = redis.call('SET', KEYS[1], '1', 'NX', 'PX', tonumber(ARGV[10])) and 1 or 0
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

-- the items and the states as stored
local algo, cost, grp, iflags, par = {}, {}, {}, {}, {}
local loaded, order, before, kalgo = {}, {}, {}, {}
local maxg = 0
for i = 1, n do
  local b = 9 + (i - 1) * 8
  algo[i] = tonumber(ARGV[b])
  if ALGO[algo[i]] == nil then return redis.error_reply('ERR sluice: unknown algorithm') end
  cost[i] = tonumber(ARGV[b + 1])
  grp[i] = tonumber(ARGV[b + 2])
  iflags[i] = tonumber(ARGV[b + 3])
  par[i] = {tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]),
            tonumber(ARGV[b + 7])}
  if grp[i] > maxg then maxg = grp[i] end
  local k = KEYS[i]
  kalgo[k] = algo[i]
  if loaded[k] == nil then
    local raw = redis.call('GET', k)
    before[i] = raw or ''
    local st = false
    if raw then
      st = {}
      for v in string.gmatch(raw, '%S+') do st[#st + 1] = tonumber(v) end
    end
    loaded[k] = st
    order[#order + 1] = k
  else
    before[i] = ''
  end
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local cur, ttl = copy(loaded), {}
local ok = {}
for i = 1, n do ok[i] = 0 end
local all = 1

if op == 'd' then
  -- decides the items of group g on cur (chaining repeats); true when all admit
  local function run(g)
    local good = true
    for i = 1, n do
      if grp[i] == g then
        local k = KEYS[i]
        local a, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], cost[i], now, 'd')
        ok[i] = a and 1 or 0
        if not a then good = false end
        if a and ns and cost[i] > 0 then cur[k] = ns; ttl[k] = t end
      end
    end
    return good
  end
  local good = run(0)
  if good and rflags % 2 == 0 then
    for g = 1, maxg do
      local sc, st = copy(cur), copy(ttl)
      if not run(g) then cur, ttl = sc, st end
    end
  else
    all = 0
    cur, ttl = copy(loaded), {}
    for i = 1, n do
      if grp[i] == 0 and iflags[i] % 2 == 1 and cost[i] > 0 then
        local k = KEYS[i]
        local _, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], cost[i], now, 's')
        if ns then cur[k] = ns; ttl[k] = t end
      end
    end
  end
else
  -- settle or release: every item applied, chained
  for i = 1, n do
    local k = KEYS[i]
    local a, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], cost[i], now, op)
    ok[i] = a and 1 or 0
    if not a then all = 0 end
    if ns then cur[k] = ns; ttl[k] = t end
  end
end

for _, k in ipairs(order) do
  local st = cur[k]
  if st and st ~= loaded[k] then
    local parts = {}
    for j, v in ipairs(st) do parts[j] = string.format('%d', v) end
    -- an envoy counter (100) lives exactly its unit + jitter: its window is in its name
    local ms = math.floor(ttl[k] / 1000000) + (kalgo[k] == 100 and 0 or 1 + slack)
    if ms < 1 then ms = 1 end
    redis.call('SET', k, table.concat(parts, ' '), 'PX', ms)
  end
end
local out = {all, now.ms, now.mn}
for i = 1, n do out[3 + i] = ok[i] end
for i = 1, n do out[3 + n + i] = before[i] end
return out
