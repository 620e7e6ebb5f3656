-- SPDX-License-Identifier: Apache-2.0
-- leaky_bucket.lua -- leaky bucket shaper (src/algo/leaky.c). Item params: p[1] = limit
-- (units drained per period), p[2] = period (ns), p[3] = capacity (burst, the request in
-- service included), p[4] = max delay (ns, 0 = none). State: "last_s last_n level_u", the
-- queued work in micro-units at `last` (monotonic); absent = empty. A request of cost n is
-- admitted iff drained + n*1e6 <= capacity*1e6 and (no max delay or the time to drain the
-- stored level <= max delay); the caller computes the delay it is held for.
-- Settle (op 's', cost = delta): level +- delta*1e6, never below 0.
-- A `last` later than now (the clock stepped back) is taken as now, level kept (codec.c
-- does the same), and written back even on a refusal: draining restarts at once.
local function lk_nsfor(L, P, amount)
  if amount <= 0 then return 0 end
  local q, r = muldiv(amount, P, L * MICRO)
  if r > 0 then q = q + 1 end
  return q
end

ALGO[6] = function(st, p, cost, now, op)
  local L, P, B, maxd = p[1], p[2], p[3], p[4]
  local last, lvl = 0, 0
  if st then
    last = rel(st[1], st[2], now.ms, now.mn)
    lvl = st[3]
  end
  local stepped = last > 0
  if stepped then last = 0 end
  local el = -last
  local cur
  if el <= 0 or lvl <= 0 then cur = math.max(lvl, 0)
  elseif el >= lk_nsfor(L, P, lvl) then cur = 0
  else cur = lvl - muldiv(el, L * MICRO, P) end
  if op == 's' then
    local nl = cur + cost * MICRO
    if nl < 0 then nl = 0 end
    return true, {now.ms, now.mn, nl}, lk_nsfor(L, P, nl)
  end
  local delay = last + lk_nsfor(L, P, lvl)
  if delay < 0 then delay = 0 end
  local nu = cur + cost * MICRO
  if cost > B or nu > B * MICRO or (maxd > 0 and delay > maxd) then
    if stepped then return false, {now.ms, now.mn, cur}, lk_nsfor(L, P, cur) end
    return false
  end
  if cost == 0 then return true end
  return true, {now.ms, now.mn, nu}, lk_nsfor(L, P, nu)
end
