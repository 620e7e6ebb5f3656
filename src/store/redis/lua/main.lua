-- SPDX-License-Identifier: Apache-2.0
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
-- ARGV[8] bit 2 (value 2): a solved challenge (SL_SREQ_PASS): each penalty item in a
--   challenge period ends it; nothing else is decided.
-- ARGV[9 + 9*(i-1) ..]: item i: algo id, cost, group, flags, p1..p4 (see each algorithm's
--   file), x (capacity protection, capacity.lua; "" for a plain item). group 0 = enforced
--   (all-or-nothing), g > 0 = shadow group g (applied only when group 0 admits and all of
--   g admits); flags 1 = charged even when rejected.
-- Capacity rules (store/group.c, in its order): before group 0 decides, each borrowing
--   path's tiers are checked (a tier may be refused: a reclaim); items with a class decide
--   with their budget's shedding; after it, a refused decision records the violation of
--   every penalty item that admitted while another item of its group refused, and the
--   reclaim marks the borrowing check asked for are written whatever the decision.
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
if op == 'd' and ARGV[8] == '0' then
  local out = fast_decide(KEYS, ARGV, now, slack) -- the common case (fast.lua)
  if out then return out end
end
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

-- the items and the states as stored (a state's tails apart: capacity.lua)
local algo, cost, grp, iflags, par, xs = {}, {}, {}, {}, {}, {}
local loaded, tloaded, tbits, order, before, kalgo = {}, {}, {}, {}, {}, {}
-- capacity protection's code is made only for a call that has an x argument (capacity.lua)
for i = 1, n do
  if ARGV[17 + (i - 1) * 9] ~= '' then
    cap_need()
    break
  end
end
local maxg = 0
for i = 1, n do
  local b = 9 + (i - 1) * 9
  algo[i] = tonumber(ARGV[b])
  if ALGO[algo[i]] == nil then return redis.error_reply('ERR sluice: unknown algorithm') end
  cost[i] = tonumber(ARGV[b + 1])
  grp[i] = tonumber(ARGV[b + 2])
  iflags[i] = tonumber(ARGV[b + 3])
  par[i] = {tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]),
            tonumber(ARGV[b + 7])}
  xs[i] = ARGV[b + 8] ~= '' and cap_x(ARGV[b + 8]) or nil
  if grp[i] > maxg then maxg = grp[i] end
  local k = KEYS[i]
  kalgo[k] = algo[i]
  if loaded[k] == nil then
    local raw = redis.call('GET', k)
    before[i] = raw or ''
    local st, tl = false, false
    local tb = xs[i] and xs[i].tail or 0
    if raw then
      st = {}
      for v in string.gmatch(raw, '%S+') do st[#st + 1] = tonumber(v) end
      if tb > 0 then
        st, tl = cap_split(st, tb, algo[i])
      elseif (algo[i] == 1 and #st > 3) or (algo[i] == 7 and #st > 7) then
        -- tails a previous configuration with classes or borrowing left: not this one's
        for j = #st, (algo[i] == 1 and 4 or 8), -1 do st[j] = nil end
      end
    end
    -- GCRA keeps no time of its last write, so a clock stepped back (the instances' wall
    -- clocks, time: local) cannot be told from debt by the state alone; the key's TTL,
    -- counted down on Redis's own clock, can: it was set to the state's freshness + 1 +
    -- slack ms. A TAT more than a second later than that says (only past B*T, beyond what
    -- no settle made) is taken back to it; the corrected state is what the caller reads.
    if st and algo[i] == 5 and #st == 2 and rel(st[1], st[2], now.ms, now.mn) > par[i][1] * par[i][2] + E9 then
      local pt = redis.call('PTTL', k)
      if pt > 0 then
        local want = (pt - 1 - slack) * MICRO
        if want < 0 then want = 0 end
        if rel(st[1], st[2], now.ms, now.mn) - want > E9 then
          st = {at(want, now.ms, now.mn)}
          before[i] = string.format('%d %d', st[1], st[2])
        end
      end
    end
    loaded[k], tloaded[k], tbits[k] = st, tl, tb
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

local cur, ttl, tl = copy(loaded), {}, copy(tloaded)
local ok = {}
for i = 1, n do ok[i] = 0 end
local all = 1

-- a key's state that may be written whatever the decision (marks, violations): its own
-- part made present, its tails copied
local function writable(i)
  local k = KEYS[i]
  if cur[k] == loaded[k] then
    local _, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], 0, now, 's', xs[i])
    if ns then cur[k] = ns; ttl[k] = t end
  end
  if tbits[k] > 0 and (tl[k] == tloaded[k] or not tl[k]) then
    tl[k] = tl[k] and tail_copy(tl[k]) or tail_fresh(tbits[k])
  end
  return k
end

if op == 'd' and math.floor(rflags / 2) % 2 == 1 then
  -- a solved challenge: each penalty item in a challenge period ends it
  all = 0
  for i = 1, n do
    local x = xs[i]
    if x and x.penalty_item and grp[i] == 0 then
      local k = KEYS[i]
      local ns = pen_pass(x.pen, cur[k] or nil, now)
      if ns then
        cur[k] = ns
        ttl[k] = pen_ttl(x.pen, ns, now)
        ok[i] = 1
        all = 1
      end
    end
  end
elseif op == 'd' then
  -- borrowing: every path's tiers checked before anything decides
  local forced, marks = {}, {}
  for i = 1, n do
    local x = xs[i]
    if x and x.bpath and x.blevel == 0 and grp[i] == 0 then
      local tiers, idx, depth = {}, {}, 0
      local found = true
      while found do
        found = false
        for j = 1, n do
          local y = xs[j]
          if y and y.bpath == x.bpath and y.blevel == depth and grp[j] == 0 then
            local k = KEYS[j]
            local mk = (tl[k] and tl[k].marks) or {-1, -1, -1, -1}
            tiers[depth] = {use = tier_use(algo[j], cur[k] or nil, par[j], now), cap = par[j][1],
                            share = math.min(y.share, par[j][1]), marks = mk}
            idx[depth] = j
            depth = depth + 1
            found = true
            break
          end
        end
      end
      if depth > 0 then
        tiers[depth - 1].share = tiers[depth - 1].cap
        local admit, level, reason, reclaim = borrow_decide(tiers, depth, now, cost[i])
        if not admit and reason == 3 then forced[idx[level]] = true end
        if reclaim >= 1 and reclaim < depth then marks[#marks + 1] = {idx[reclaim], idx[reclaim - 1]} end
      end
    end
  end
  -- decides the items of group g on cur (chaining repeats); true when all admit
  local fixes = {}
  local function run(g)
    local good = true
    for i = 1, n do
      if grp[i] == g then
        local k = KEYS[i]
        local x = xs[i]
        local a, ns, t, nt
        if g == 0 and x and x.cls then
          a, ns, t, nt = cap_decide(algo[i], cur[k] or nil, tl[k] or nil, par[i], cost[i], now, x)
        else
          a, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], cost[i], now, 'd', x)
        end
        if g == 0 and forced[i] then a = false end
        ok[i] = a and 1 or 0
        if not a then good = false end
        if a and ns and cost[i] > 0 then
          cur[k] = ns; ttl[k] = t
          if nt then tl[k] = nt end
        elseif not a and ns then
          fixes[#fixes + 1] = {k, ns, t} -- a state from the future, moved to the present
        end
      end
    end
    return good
  end
  local good = run(0)
  if good and rflags % 2 == 0 then
    for g = 1, maxg do
      local sc, st, stl = copy(cur), copy(ttl), copy(tl)
      if not run(g) then cur, ttl, tl = sc, st, stl end
    end
  else
    all = 0
    cur, ttl, tl = copy(loaded), {}, copy(tloaded)
    for i = 1, n do
      if grp[i] == 0 and iflags[i] % 2 == 1 and cost[i] > 0 then
        local k = KEYS[i]
        local _, ns, t = ALGO[algo[i]](cur[k] or nil, par[i], cost[i], now, 's', xs[i])
        if ns then cur[k] = ns; ttl[k] = t end
      end
    end
    -- penalties: a violation for each penalty item that admitted while another item of
    -- its group refused (the limit refused its offender)
    for i = 1, n do
      local x = xs[i]
      if x and x.penalty_item and x.pgrp and grp[i] == 0 and ok[i] == 1 then
        local refused = false
        for j = 1, n do
          local y = xs[j]
          if j ~= i and grp[j] == 0 and y and y.pgrp == x.pgrp and not y.penalty_item and ok[j] == 0 then
            refused = true
          end
        end
        if refused then
          local k = KEYS[i]
          local ns = pen_violation(x.pen, loaded[k] or nil, now)
          cur[k] = ns
          ttl[k] = pen_ttl(x.pen, ns, now)
        end
      end
    end
  end
  -- a refused key whose state was from the future (the clock stepped back) gets it moved
  -- to the present whatever the decision, unless this call wrote the key anyway: else it
  -- would stay refused until the clock caught up (fixed and sliding windows, quotas)
  for _, f in ipairs(fixes) do
    if cur[f[1]] == loaded[f[1]] then cur[f[1]] = f[2]; ttl[f[1]] = f[3] end
  end
  -- reclaim marks, whatever the decision
  for _, m in ipairs(marks) do
    local pk, ok2 = writable(m[1]), writable(m[2])
    local span = xs[m[1]].reclaim
    local pm, om = tl[pk].marks, tl[ok2].marks
    pm[1], pm[2] = mark_later(pm[1], pm[2], now, span)
    om[3], om[4] = mark_later(om[3], om[4], now, span)
  end
else
  -- settle or release: every item applied, chained
  for i = 1, n do
    local k = KEYS[i]
    local x = xs[i]
    local p = par[i]
    local cls = nil
    if op == 'l' and algo[i] == 7 and x and x.tail and x.tail % 2 == 1 then
      -- concurrency with classes: the lease's class rides above its slots
      cls = math.floor(p[4] / CLASS_SLOTS) % 8
      p = {p[1], p[2], p[3], p[4] % CLASS_SLOTS}
    end
    local a, ns, t = ALGO[algo[i]](cur[k] or nil, p, cost[i], now, op, x)
    ok[i] = a and 1 or 0
    if not a then all = 0 end
    if ns then cur[k] = ns; ttl[k] = t end
    if a and cls ~= nil and ns then
      local nt = tail_copy(tl[k] or tail_fresh(x.tail))
      nt.use[cls + 1] = math.max(0, nt.use[cls + 1] - p[4])
      tl[k] = nt
    end
  end
end

for _, k in ipairs(order) do
  local st = cur[k]
  local t = tl[k]
  if st and (st ~= loaded[k] or (t and t ~= tloaded[k])) then
    local parts = {}
    for j, v in ipairs(st) do parts[j] = string.format('%d', v) end
    local life = ttl[k] or 0
    if tbits[k] > 0 then
      t = t or tail_fresh(tbits[k])
      if t.use and #st == 7 then -- concurrency: class counts within what is in flight
        local inflight = 0
        for j = 2, 7 do inflight = inflight + st[j] end
        t = tail_copy(t)
        clamp_use(t.use, inflight)
      end
      if t.marks then
        for j = 1, 3, 2 do
          if not (t.marks[j] == -1 and t.marks[j + 1] == -1) then
            local r = rel(t.marks[j], t.marks[j + 1], now.ms, now.mn)
            if r > life then life = r end
          end
        end
      end
      tail_numbers(t, parts)
    end
    -- an envoy counter (101) lives exactly its unit + jitter: its window is in its name
    local ms = math.floor(life / 1000000) + (kalgo[k] == 101 and 0 or 1 + slack)
    if ms < 1 then ms = 1 end
    redis.call('SET', k, table.concat(parts, ' '), 'PX', ms)
  end
end
local out = {all, now.ms, now.mn}
for i = 1, n do out[3 + i] = ok[i] end
for i = 1, n do out[3 + n + i] = before[i] end
return out
