-- SPDX-License-Identifier: Apache-2.0
-- fixed_window.lua -- fixed window (src/algo/fixed.c). Item params: p[1] = limit,
-- p[2] = window (ns). State: "start_s start_n count", windows aligned on multiples of the
-- window since the Unix epoch on the script's wall clock; a stored window later than the
-- current one (clock stepped back) stays in force. Admits iff count + cost <= limit.
-- Settle (op 's', cost = delta): the window in force gains delta (refunds stop at 0).
ALGO[1] = function(st, p, cost, now, op)
  local L, P = p[1], p[2]
  local e = wall_mod(now, p[2])
  local start, count = -e, 0
  local ss, sn = at(-e, now.ws, now.wn)
  if st then
    local r = rel(st[1], st[2], now.ws, now.wn)
    if r >= -e then start, count, ss, sn = r, st[3], st[1], st[2] end
  end
  if op == 's' then
    count = count + cost
    if count < 0 then count = 0 end
    return true, {ss, sn, count}, start + P
  end
  if cost > L then return false end
  if count > L - cost then return false end
  if cost == 0 then return true end
  return true, {ss, sn, count + cost}, start + P
end
