-- SPDX-License-Identifier: Apache-2.0
-- fast.lua -- the common decision without main.lua's general machinery: op 'd', no request
-- flags, every item plain (x ""), enforced (group 0) and on a key of its own. The rules
-- are main.lua's for that case, step by step: the states read first (GCRA's TTL check
-- included), every item decided on its stored state; all admit -> the admitted states
-- written; one refuses -> nothing kept but the charges (item flag 1, settled onto the
-- stored state) and the states from the future moved to the present. Same reply, same
-- writes, same expiries. Why: Redis's time per call is the product's ceiling (every
-- instance shares it), and the general path's tables and closures (copies for shadow
-- groups, borrowing, tails) cost a plain decision twice what its own arithmetic does.
-- In the function library (codec.c) this file's top level runs once at load.
local FMT = {'%d', '%d %d', '%d %d %d', '%d %d %d %d', '%d %d %d %d %d', '%d %d %d %d %d %d',
             '%d %d %d %d %d %d %d'}

-- a state's numbers as stored ("%d" each, one space apart)
local function state_string(st)
  local f = FMT[#st]
  if f then return string.format(f, unpack(st)) end
  local parts = {}
  for j, v in ipairs(st) do parts[j] = string.format('%d', v) end
  return table.concat(parts, ' ')
end

-- the reply, or nil when the call is not the common case (main.lua decides it)
local function fast_decide(KEYS, ARGV, now, slack)
  local n = #KEYS
  for i = 1, n do
    local b = (i - 1) * 9
    if ARGV[b + 17] ~= '' or ARGV[b + 11] ~= '0' then return nil end
    for j = 1, i - 1 do
      if KEYS[j] == KEYS[i] then return nil end
    end
  end
  local out = {1, now.ms, now.mn}
  local st, par, fn = {}, {}, {}
  -- the states as stored, before anything decides (main.lua's order of reads)
  for i = 1, n do
    local b = 9 + (i - 1) * 9
    local a = tonumber(ARGV[b])
    local f = ALGO[a]
    if f == nil then return redis.error_reply('ERR sluice: unknown algorithm') end
    fn[i] = f
    local p = {tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])}
    par[i] = p
    local k = KEYS[i]
    local raw = redis.call('GET', k)
    out[3 + n + i] = raw or ''
    local s = false
    if raw then
      s = {}
      for v in string.gmatch(raw, '%S+') do s[#s + 1] = tonumber(v) end
      if (a == 1 and #s > 3) or (a == 7 and #s > 7) then
        for j = #s, (a == 1 and 4 or 8), -1 do s[j] = nil end
      end
      -- GCRA: a TAT beyond what its key's TTL allows (main.lua says why)
      if a == 5 and #s == 2 and rel(s[1], s[2], now.ms, now.mn) > p[1] * p[2] + E9 then
        local pt = redis.call('PTTL', k)
        if pt > 0 then
          local want = (pt - 1 - slack) * MICRO
          if want < 0 then want = 0 end
          if rel(s[1], s[2], now.ms, now.mn) - want > E9 then
            s = {at(want, now.ms, now.mn)}
            out[3 + n + i] = string.format('%d %d', s[1], s[2])
          end
        end
      end
    end
    st[i] = s
  end
  local new, life, good = {}, {}, true
  for i = 1, n do
    local b = 9 + (i - 1) * 9
    local cost = tonumber(ARGV[b + 1])
    local a, ns, t = fn[i](st[i] or nil, par[i], cost, now, 'd', nil)
    out[3 + i] = a and 1 or 0
    if not a then
      good = false
      if ns then new[i] = ns; life[i] = t; out[3 + i] = 0 end
    elseif ns and cost > 0 then
      new[i] = ns; life[i] = t
    end
  end
  if not good then
    out[1] = 0
    -- a refusal: admitted states dropped; charges settled onto the stored state; a refused
    -- state from the future kept moved to the present (unless charged)
    for i = 1, n do
      local b = 9 + (i - 1) * 9
      if out[3 + i] == 1 then new[i] = nil end
      local cost = tonumber(ARGV[b + 1])
      if tonumber(ARGV[b + 3]) % 2 == 1 and cost > 0 then
        local _, ns, t = fn[i](st[i] or nil, par[i], cost, now, 's', nil)
        if ns then new[i] = ns; life[i] = t end
      end
    end
  end
  for i = 1, n do
    local s = new[i]
    if s then
      -- an envoy counter (101) lives exactly its unit + jitter: its window is in its name
      local ms = math.floor((life[i] or 0) / 1000000) + (ARGV[9 + (i - 1) * 9] == '101' and 0 or 1 + slack)
      if ms < 1 then ms = 1 end
      redis.call('SET', KEYS[i], state_string(s), 'PX', ms)
    end
  end
  return out
end
