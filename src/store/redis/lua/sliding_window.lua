-- SPDX-License-Identifier: Apache-2.0
-- sliding_window.lua -- sliding window counter (src/algo/sliding.c). Item params:
-- p[1] = limit, p[2] = window W (ns). State: "start_s start_n cur prev", the current
-- wall-aligned window and the counts of it and of the one before. At elapsed e it admits
-- iff prev*(W-e) + (cur+cost)*W <= limit*W (compared exactly). A stored window later than
-- the current one (the clock stepped back) is from the future: its counts move into the
-- windows in force (as sliding.c does); a rejection also returns that state to write.
-- Settle (op 's', cost = delta): the current count gains delta (refunds stop at 0).
ALGO[2] = function(st, p, cost, now, op)
  local L, P = p[1], p[2]
  local e = wall_mod(now, P)
  local start, cur, prev = -e, 0, 0
  local ss, sn = at(-e, now.ws, now.wn)
  local future = false
  if st then
    local r = rel(st[1], st[2], now.ws, now.wn)
    if r >= -e then cur, prev, future = st[3], st[4], r > -e
    elseif r + P == -e then prev = st[3] end
  end
  local fresh = start + 2 * P
  if op == 's' then
    cur = cur + cost
    if cur < 0 then cur = 0 end
    return true, {ss, sn, cur, prev}, fresh
  end
  local el = -start
  local x = L - cur - cost
  if cost > L or x < 0 or cmpmul(prev, P - el, x, P) > 0 then
    if future then return false, {ss, sn, cur, prev}, fresh end
    return false
  end
  if cost == 0 then return true end
  return true, {ss, sn, cur + cost, prev}, fresh
end
