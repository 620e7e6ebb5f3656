-- SPDX-License-Identifier: Apache-2.0
-- quota.lua -- calendar quota (src/algo/quota.c). Item params: p[1] = budget,
-- p[2] = start of the caller's current period (UTC s), p[3] = its end (UTC s): Lua has no
-- time zone database, so the caller (which has one) names the period. State:
-- "period_start_s used". A later stored period (the clock stepped back) is from the
-- future: its usage moves into the current period (as quota.c does), so a step hands out no
-- second budget and blocks nobody past the period; a rejection returns that state too.
-- Admits iff used + cost <= budget. Settle (op 's', cost = delta): used +- delta, >= 0.
ALGO[8] = function(st, p, cost, now, op)
  local L, ps, pe = p[1], p[2], p[3]
  local used, future = 0, false
  if st then
    if st[1] == ps then used = st[2]
    elseif st[1] > ps then used, future = st[2], true end
  end
  local ttl = (pe - now.ws) * E9 + 3600 * E9
  if op == 's' then
    used = used + cost
    if used < 0 then used = 0 end
    return true, {ps, used}, ttl
  end
  local fits = cost <= L and used <= L - cost
  if not fits and future then return false, {ps, used}, ttl end
  if not fits or cost == 0 then return fits end
  return true, {ps, used + cost}, ttl
end
