-- SPDX-License-Identifier: Apache-2.0
-- sliding_log.lua -- sliding log (src/algo/log.c). Item params: p[1] = limit (at most
-- 1024), p[2] = window W (ns). State: "s1 n1 s2 n2 ...", one monotonic timestamp per
-- admitted unit, oldest first. Admits iff the entries in (now - W, now] plus cost fit in
-- the limit; then appends cost entries at now (the oldest dropped beyond `limit`).
-- Settle (op 's', cost = delta): refunds drop the newest live entries, charges append.
-- A newest entry later than now (the clock stepped back) shifts every entry back by that
-- much (codec.c does the same), written back even on a refusal: the log ages from now.
ALGO[3] = function(st, p, cost, now, op)
  local L, W = p[1], p[2]
  local live = {}
  local stepped = false
  if st then
    local m = math.floor(#st / 2)
    if m > L then m = L end
    local ahead = 0
    if m > 0 then ahead = rel(st[2 * m - 1], st[2 * m], now.ms, now.mn) end
    stepped = ahead > 0
    for i = 1, m do
      local s, n = st[2 * i - 1], st[2 * i]
      local r = rel(s, n, now.ms, now.mn)
      if stepped then
        r = r - ahead
        s, n = at(r, now.ms, now.mn)
      end
      if r > -W then live[#live + 1] = {s, n} end
    end
  end
  local function out()
    local flat = {}
    for i, e in ipairs(live) do flat[2 * i - 1] = e[1]; flat[2 * i] = e[2] end
    local ttl = 0
    if #live > 0 then ttl = rel(live[#live][1], live[#live][2], now.ms, now.mn) + W end
    return flat, ttl
  end
  local function append(k)
    if k > L then k = L end
    local drop = #live + k - L
    if drop > 0 then
      local keep = {}
      for i = drop + 1, #live do keep[#keep + 1] = live[i] end
      live = keep
    end
    for _ = 1, k do live[#live + 1] = {now.ms, now.mn} end
  end
  if op == 's' then
    if cost < 0 then
      local n = #live + cost
      if n < 0 then n = 0 end
      for i = #live, n + 1, -1 do live[i] = nil end
    else
      append(cost)
    end
    local flat, ttl = out()
    return true, flat, ttl
  end
  if cost > L or #live + cost > L then
    if stepped then
      local flat, ttl = out()
      return false, flat, ttl
    end
    return false
  end
  if cost == 0 then return true end
  append(cost)
  local flat, ttl = out()
  return true, flat, ttl
end
