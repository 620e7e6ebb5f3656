-- SPDX-License-Identifier: Apache-2.0
-- gcra.lua -- GCRA (src/algo/gcra.c). Item params: p[1] = T (emission interval, ns),
-- p[2] = B (capacity). State (one string): "tat_s tat_n", the theoretical arrival time on
-- the script's monotonic clock. Admits iff max(tat, now) + cost*T - B*T <= now.
-- Settle (op 's', cost = delta units): tat = max(tat, now) + delta*T, never below now.
-- Returns allowed, the new state (nil: nothing to write) and the ns until it is fresh.
ALGO[5] = function(st, p, cost, now, op)
  local T, B = p[1], p[2]
  local tat = 0
  if st then
    tat = rel(st[1], st[2], now.ms, now.mn)
    if tat < 0 then tat = 0 end
  end
  if op == 's' then
    tat = tat + cost * T
    if tat < 0 then tat = 0 end
    local s, n = at(tat, now.ms, now.mn)
    return true, {s, n}, tat
  end
  if cost > B then return false end
  local new_tat = tat + cost * T
  if new_tat - B * T > 0 then return false end
  if cost == 0 then return true end
  local s, n = at(new_tat, now.ms, now.mn)
  return true, {s, n}, new_tat
end
