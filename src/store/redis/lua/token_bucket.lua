-- SPDX-License-Identifier: Apache-2.0
-- token_bucket.lua -- token bucket (src/algo/tb.c). Item params: p[1] = limit (units per
-- period), p[2] = period (ns), p[3] = capacity (burst). State: "last_s last_n tokens_u",
-- tokens in micro-units at `last` on the script's monotonic clock; absent = a full bucket.
-- Refill floor(elapsed * limit * 1e6 / period) micro-units, capped; admits iff
-- tokens >= cost * 1e6 and then restarts the state at now.
-- Settle (op 's', cost = delta): tokens - delta*1e6, capped at capacity (debt allowed).
-- A `last` later than now (the clock stepped back) is taken as now, tokens kept (codec.c
-- does the same), and written back even on a refusal: refill restarts at once instead of
-- when the clock catches up.
local function tb_nsfor(L, P, need)
  if need <= 0 then return 0 end
  local q, r = muldiv(need, P, L * MICRO)
  if r > 0 then q = q + 1 end
  return q
end

ALGO[4] = function(st, p, cost, now, op)
  local L, P, B = p[1], p[2], p[3]
  local cap = B * MICRO
  local last, tok = 0, cap
  if st then
    last = rel(st[1], st[2], now.ms, now.mn)
    tok = st[3]
  end
  local stepped = last > 0
  if stepped then last = 0 end
  local cur = tok
  local el = -last
  if el > 0 then
    if tok >= cap then cur = cap
    elseif el >= tb_nsfor(L, P, cap - tok) then cur = cap
    else
      cur = tok + muldiv(el, L * MICRO, P)
      if cur > cap then cur = cap end
    end
  end
  local nt
  if op == 's' then
    nt = cur - cost * MICRO
    if nt > cap then nt = cap end
    if nt < -BIG then nt = -BIG end
  else
    local need = cost * MICRO
    if cost > B or cur < need then
      if stepped then return false, {now.ms, now.mn, cur}, tb_nsfor(L, P, cap - cur) end
      return false
    end
    if cost == 0 then return true end
    nt = cur - need
  end
  return true, {now.ms, now.mn, nt}, tb_nsfor(L, P, cap - nt)
end
