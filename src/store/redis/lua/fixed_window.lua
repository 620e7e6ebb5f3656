-- SPDX-License-Identifier: Apache-2.0
-- fixed_window.lua -- fixed window (src/algo/fixed.c). Item params: p[1] = limit,
-- p[2] = window (ns). State: "start_s start_n count", windows aligned on multiples of the
-- window since the Unix epoch on the script's wall clock. A stored window later than the
-- current one (the clock stepped back) is from the future: its count moves into the window
-- in force (as fixed.c does), so nobody waits for the clock to catch up; a rejection then
-- also returns the moved state, which main.lua writes. Admits iff count + cost <= limit.
-- Settle (op 's', cost = delta): the window in force gains delta (refunds stop at 0).
ALGO[1] = function(st, p, cost, now, op)
  local L, P = p[1], p[2]
  local e = wall_mod(now, p[2])
  local start, count = -e, 0
  local ss, sn = at(-e, now.ws, now.wn)
  local future = false
  if st then
    local r = rel(st[1], st[2], now.ws, now.wn)
    if r >= -e then count, future = st[3], r > -e end
  end
  if op == 's' then
    count = count + cost
    if count < 0 then count = 0 end
    return true, {ss, sn, count}, start + P
  end
  if cost > L or count > L - cost then
    if future then return false, {ss, sn, count}, start + P end
    return false
  end
  if cost == 0 then return true end
  return true, {ss, sn, count + cost}, start + P
end
