-- SPDX-License-Identifier: Apache-2.0
-- concurrency.lua -- in-flight slots with expiring leases (src/algo/conc.c). Item params:
-- p[1] = limit, p[2] = lease (ns), p[3] = bucket width w (ns, >= 1 us). State:
-- "base c1 .. c6": the absolute bucket number (monotonic ns / w) of counts c1, and the
-- slots acquired per bucket; bucket i expires at (base+i)*w + w + lease. Admits iff the
-- live slots + cost <= limit. Settle (op 's', cost = delta): slots added to the newest
-- bucket or taken newest first. Release (op 'l', cost = lease bucket, p[4] = slots).
-- A state whose newest bucket is more than one bucket ahead of now (the clock stepped
-- back) is pulled back to that bound, counts kept, as conc.c's normalise does, and written
-- back even on a refusal: its slots expire within lease + 2w of now. A lease taken before
-- the step then names a bucket that moved: its release is refused and it expires instead.
local NB = 6
ALGO[7] = function(st, p, cost, now, op)
  local L, lease, w = p[1], p[2], p[3]
  -- bucket of now and its offset inside it
  local q1, r1 = muldiv(now.ms, E9, w)
  local t = r1 + now.mn
  local q2 = idiv(t, w)
  local b = q1 + q2
  local off = t - q2 * w
  local c = {0, 0, 0, 0, 0, 0}
  local base = b - (NB - 1)
  local stepped = false
  if st then
    local sb = st[1]
    local shift = b - (sb + NB - 1)
    if shift >= NB then
      sb = base
    elseif shift > 0 then
      for i = 1, NB do c[i] = st[i + 1 + shift] or 0 end
      sb = sb + shift
    elseif shift < -1 then
      for i = 1, NB do c[i] = st[i + 1] end
      sb = base + 1
      stepped = true
    else
      for i = 1, NB do c[i] = st[i + 1] end
    end
    base = sb
  end
  -- now - base*w = (b - base)*w + off; bucket i (1-based) expires at i*w + lease past base
  local since = (b - base) * w + off
  local used = 0
  local last = 0
  for i = 1, NB do
    if since >= i * w + lease then c[i] = 0 end
    used = used + c[i]
    if c[i] > 0 then last = i end
  end
  local function left()
    local l = 0
    for i = 1, NB do if c[i] > 0 then l = i * w + lease - since end end
    return l
  end
  if op == 's' then
    if cost > 0 then
      c[NB] = math.min(c[NB] + cost, 4294967295)
    else
      local need = -cost
      for i = NB, 1, -1 do
        local tk = math.min(c[i], need)
        c[i] = c[i] - tk
        need = need - tk
      end
    end
    return true, {base, c[1], c[2], c[3], c[4], c[5], c[6]}, left()
  elseif op == 'l' then
    for i = 1, NB do
      if (base + i - 1) % 1099511627776 == cost then
        if c[i] == 0 then return false end
        c[i] = c[i] - math.min(p[4], c[i])
        return true, {base, c[1], c[2], c[3], c[4], c[5], c[6]}, left()
      end
    end
    return false
  end
  local fits = cost <= L and used <= L - cost
  if not fits and stepped then return false, {base, c[1], c[2], c[3], c[4], c[5], c[6]}, left() end
  if not fits or cost == 0 then return fits end
  c[NB] = math.min(c[NB] + cost, 4294967295)
  return true, {base, c[1], c[2], c[3], c[4], c[5], c[6]}, left()
end
