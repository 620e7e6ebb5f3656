-- SPDX-License-Identifier: Apache-2.0
-- capacity.lua -- capacity protection in the script, the same transitions as the C code
-- (src/algo/capacity.c, adaptive.c, shed.c, penalty.c, borrow.c; the client recomputes
-- every answer from the states the script saw, so both must agree exactly). Integers
-- below 2^53 only: Q16.16 products and ppm shares through muldiv, absolute times as
-- (seconds, nanoseconds) pairs compared through rel(), "never" as the pair (-1, -1).
-- An item's x argument (capcodec.c): "F T ..." with F: 1 shed (cls n fill/reserve x n),
-- 2 penalty group, 4 borrowing tier (bpath blevel share reclaim), 8 adaptive controller
-- (18 parameters), 16 penalty parameters (first factor max forgive challenge), 32 release
-- sample (latency outcome), 64 the penalty item; T: the state's tails (1: 8 per-class
-- slot counts, 2: borrowing marks reclaim_s reclaim_n owed_s owed_n).
-- States: adaptive concurrency (ALGO[9]) "base c1..c6 limit noload last_avg ws_s ws_n sum
-- probe_s probe_n ok drops max_inflight stuck probing flags u1..u8 fast_sum fast_ok" (31
-- numbers; a state of 29 from before issue 27 reads as fast_sum = fast_ok = 0), the
-- penalty (ALGO[100]) "until_s until_n last_s last_n level".
-- Why inside cap_load(): Redis runs a script's whole body at every call, and each
-- `local function` is a closure made again each time; this file is two thirds of the
-- script, so a plain decision that made them all paid for them (EVALSHA per second fell
-- to 0.6x). main.lua calls cap_need() before its items, and only when one carries an
-- x argument (every adaptive and penalty item does: their flags are never 0).
local cap_x, tail_fresh, cap_split, tail_copy, tail_numbers, clamp_use, pen_ttl, pen_violation, pen_pass, cap_decide, tier_use, borrow_decide, mark_later
local CLASS_SLOTS = 2097152 -- 2^21: the class rides above the slots in a lease
local function cap_load()
  local Q16 = 65536
  local PPM = 1000000
  local U32 = 4294967295

  local function bit(f, b) return math.floor(f / b) % 2 == 1 end

  local function cap_x(s)
    if s == nil or s == '' then return nil end
    local v = {}
    for w in string.gmatch(s, '%S+') do v[#v + 1] = tonumber(w) end
    local x = {f = v[1], tail = v[2]}
    local k = 3
    if bit(x.f, 1) then
      x.cls = v[k]
      local n = v[k + 1]
      x.shed = {n = n, fill = {}, res = {}}
      k = k + 2
      for i = 1, n do
        x.shed.fill[i], x.shed.res[i] = v[k], v[k + 1]
        k = k + 2
      end
    end
    if bit(x.f, 2) then x.pgrp = v[k]; k = k + 1 end
    if bit(x.f, 4) then
      x.bpath, x.blevel, x.share, x.reclaim = v[k], v[k + 1], v[k + 2], v[k + 3]
      k = k + 4
    end
    if bit(x.f, 8) then
      local a = {}
      for i = 1, 18 do a[i] = v[k + i - 1] end
      k = k + 18
      x.ad = {ctl = a[1], min = a[2], max = a[3], initial = a[4], window = a[5], min_samples = a[6],
              smoothing = a[7], tolerance = a[8], queue = a[9], alpha_min = a[10], alpha_pct = a[11],
              beta_min = a[12], beta_pct = a[13], increase = a[14], backoff = a[15], timeout = a[16],
              probe_after = a[17], probe_every = a[18]}
    end
    if bit(x.f, 16) then
      x.pen = {first = v[k], factor = v[k + 1], max = v[k + 2], forgive = v[k + 3], chal = v[k + 4]}
      k = k + 5
    end
    if bit(x.f, 32) then x.lat, x.outcome = v[k], v[k + 1]; k = k + 2 end
    x.penalty_item = bit(x.f, 64)
    return x
  end

  -- ---- tails -------------------------------------------------------------------------------

  local function tail_len(t)
    return (bit(t, 1) and 8 or 0) + (bit(t, 2) and 4 or 0)
  end

  local function tail_fresh(t)
    local tl = {}
    if bit(t, 1) then tl.use = {0, 0, 0, 0, 0, 0, 0, 0} end
    if bit(t, 2) then tl.marks = {-1, -1, -1, -1} end
    return tl
  end

  -- splits a stored state into its own part and the tails t asks for. The tails stored
  -- are read from the state's length, not from t: a reload that added or removed classes
  -- or borrowing left a state with other tails (12 = class slots and marks, 8 = slots, 4 =
  -- marks after the own part); one t lacks starts fresh, one t no longer has is dropped.
  local OWN = {[1] = 3, [7] = 7} -- the algorithms with tails: fixed window, concurrency
  local function cap_split(st, t, algo)
    local n = OWN[algo] or (#st - tail_len(t))
    local extra = #st - n
    local has_use, has_marks = extra == 8 or extra == 12, extra == 4 or extra == 12
    local own, tl, k = {}, tail_fresh(t), n + 1
    for i = 1, n do own[i] = st[i] end
    if has_use then
      if tl.use then for i = 1, 8 do tl.use[i] = st[k + i - 1] end end
      k = k + 8
    end
    if has_marks and tl.marks then tl.marks = {st[k], st[k + 1], st[k + 2], st[k + 3]} end
    return own, tl
  end

  local function tail_copy(tl)
    local c = {}
    if tl.use then c.use = {}; for i = 1, 8 do c.use[i] = tl.use[i] end end
    if tl.marks then c.marks = {tl.marks[1], tl.marks[2], tl.marks[3], tl.marks[4]} end
    return c
  end

  local function tail_numbers(tl, parts)
    if tl.use then for i = 1, 8 do parts[#parts + 1] = string.format('%d', tl.use[i]) end end
    if tl.marks then for i = 1, 4 do parts[#parts + 1] = string.format('%d', tl.marks[i]) end end
  end

  -- class counts never above what is in flight: taken off the lowest classes first
  local function clamp_use(use, inflight)
    local sum = 0
    for i = 1, 8 do sum = sum + use[i] end
    for i = 8, 1, -1 do
      if sum <= inflight then break end
      local t = math.min(sum - inflight, use[i])
      use[i] = use[i] - t
      sum = sum - t
    end
  end

  -- "now < (s, n)" for a pair that may be never (-1, -1)
  local function before_pair(now, s, n)
    if s == -1 and n == -1 then return false end
    return rel(s, n, now.ms, now.mn) > 0
  end

  -- ---- concurrency buckets (conc.c) -----------------------------------------------------------

  local NB = 6
  -- The buckets of a state (st[1] = base, st[2..7] counts) at now: the window slid, expired
  -- buckets zeroed; returns base, counts, since (now - base*w) and the slots expired.
  local function conc_norm(st, lease, w, now)
    local q1, r1 = muldiv(now.ms, E9, w)
    local t = r1 + now.mn
    local q2 = idiv(t, w)
    local b = q1 + q2
    local off = t - q2 * w
    local c = {0, 0, 0, 0, 0, 0}
    local base = b - (NB - 1)
    local expired = 0
    if st then
      local sb = st[1]
      local shift = b - (sb + NB - 1)
      if shift >= NB then
        for i = 1, NB do expired = expired + st[i + 1] end
        sb = base
      elseif shift > 0 then
        for i = 1, shift do expired = expired + st[i + 1] end
        for i = 1, NB - shift do c[i] = st[i + 1 + shift] end
        sb = sb + shift
      else
        for i = 1, NB do c[i] = st[i + 1] end
        if shift < -1 then sb = b - (NB - 1) + 1 end -- from the future: pulled back, counts kept
      end
      base = sb
    end
    local since = (b - base) * w + off
    for i = 1, NB do
      if c[i] > 0 and since >= i * w + lease then
        expired = expired + c[i]
        c[i] = 0
      end
    end
    return base, c, since, expired
  end

  local function conc_sum(c)
    local s = 0
    for i = 1, NB do s = s + c[i] end
    return s
  end

  local function conc_left(c, since, w, lease)
    local l = 0
    for i = 1, NB do if c[i] > 0 then l = i * w + lease - since end end
    return l
  end

  -- ---- the adaptive controller (adaptive.c) ---------------------------------------------------

  local MAX_WINDOW_SAMPLES = 8388608
  local SUM_FULL = 4503599627370496 -- 2^52
  local STALE_WINDOWS, PROBE_WINDOWS = 16, 10
  local LAT_MAX = 1099511627776 -- 2^40

  local function ad_clamp(a, l)
    if l < a.min * Q16 then return a.min * Q16 end
    if l > a.max * Q16 then return a.max * Q16 end
    return l
  end

  local function ad_reset(d, now)
    d.ws_s, d.ws_n = now.ms, now.mn
    d.sum, d.ok, d.drops, d.maxin = 0, 0, 0, 0
    d.fsum, d.fok = 0, 0
  end

  -- adaptive.c's fast_sample and window_avg: an ok sample below 3/4 of the no-load
  -- estimate (before there is one, of the running latency of the window's other samples)
  -- is fast; the window's latency leaves the fast ones out while they are a minority.
  local function ad_fast(d, lat)
    local ref = d.noload
    if ref == 0 then
      local n = d.ok - d.fok
      if n == 0 then return false end
      ref = math.floor((d.sum - d.fsum) / n)
    end
    return lat < math.floor(ref / 4) * 3
  end

  local function ad_avg(d)
    if d.ok == 0 then return 0 end
    local sum, n = d.sum, d.ok
    if d.fok * 2 < n then sum, n = sum - d.fsum, n - d.fok end
    local avg = math.floor(sum / n)
    if avg < 1 then avg = 1 end
    return avg
  end

  local function ad_init(a, now)
    local d = {limit = ad_clamp(a, a.initial * Q16), noload = 0, last_avg = 0, probing = 1,
               pr_s = now.ms, pr_n = now.mn, stuck = 0, flags = 0}
    ad_reset(d, now)
    return d
  end

  local function ad_limit(a, d)
    if d.probing == 1 then return a.min end
    return math.floor(ad_clamp(a, d.limit) / Q16)
  end

  local function isqrt32(v)
    local r, b = 0, 1073741824
    while b ~= 0 do
      if v >= r + b then
        v = v - (r + b)
        r = math.floor(r / 2) + b
      else
        r = math.floor(r / 2)
      end
      b = math.floor(b / 4)
    end
    return r
  end

  local function smooth(a, l, target)
    if target >= l then return l + muldiv(target - l, a.smoothing, Q16) end
    local down = muldiv(l - target, a.smoothing, Q16)
    if down >= l then return 0 end
    return l - down
  end

  local function app_limited(d) return d.maxin * 2 < math.floor(d.limit / Q16) end

  local function gradient2(a, d, avg)
    local l = d.limit
    local g = muldiv(d.noload, a.tolerance, avg)
    if g > Q16 then g = Q16 end
    if g < Q16 / 2 then g = Q16 / 2 end
    local target
    if g == Q16 then
      if app_limited(d) then return l end
      local q = a.queue
      if q == 0 then q = isqrt32(math.floor(l / Q16)) end
      if q == 0 then q = 1 end
      target = l + q * Q16
    else
      target = muldiv(l, g, Q16)
    end
    return smooth(a, l, target)
  end

  local function vegas(a, d, avg)
    local l = d.limit
    local queue = 0
    if avg > d.noload then queue = muldiv(l, avg - d.noload, avg) end
    local alpha = math.floor(l * a.alpha_pct / 100)
    local beta = math.floor(l * a.beta_pct / 100)
    if alpha < a.alpha_min * Q16 then alpha = a.alpha_min * Q16 end
    if beta < a.beta_min * Q16 then beta = a.beta_min * Q16 end
    local target = l
    if queue < alpha then
      if app_limited(d) then return l end
      target = l + (alpha - queue)
    elseif queue > beta then
      if queue - beta >= l then target = 0 else target = l - (queue - beta) end
    end
    return smooth(a, l, target)
  end

  local function aimd(a, d)
    if app_limited(d) then return d.limit end
    return d.limit + a.increase * Q16
  end

  local function window_len(a, d)
    local w = a.window
    if d.last_avg > math.floor(w / 2) then w = 2 * d.last_avg end
    return w
  end

  local function since(s, n, now) return -rel(s, n, now.ms, now.mn) end

  local function start_probe(d, now)
    d.probing = 1
    d.pr_s, d.pr_n = now.ms, now.mn
    d.stuck = 0
    ad_reset(d, now)
  end

  local function close_window(a, d, now)
    local w = window_len(a, d)
    local full = d.ok >= MAX_WINDOW_SAMPLES or d.sum >= SUM_FULL
    local el = since(d.ws_s, d.ws_n, now)
    if el < w and not full then return false end
    local avg = ad_avg(d)
    if d.probing == 1 then
      if d.ok >= 4 * a.min_samples or full then
        d.noload = avg
        d.last_avg = avg
      elseif since(d.pr_s, d.pr_n, now) < PROBE_WINDOWS * w then
        return false
      elseif d.ok >= a.min_samples or (d.noload == 0 and d.ok > 0) then
        d.noload = avg
        d.last_avg = avg
      end
      d.probing = 0
      d.pr_s, d.pr_n = now.ms, now.mn
      ad_reset(d, now)
      return true
    end
    if d.ok + d.drops < a.min_samples and not full then
      if el >= STALE_WINDOWS * w then ad_reset(d, now) end
      return false
    end
    local l = d.limit
    if d.ok > 0 then
      d.last_avg = avg
      if d.noload == 0 or avg < d.noload then d.noload = avg end
    end
    if d.flags % 2 == 1 then d.flags = d.flags - 1 end
    if d.drops > 0 then
      l = muldiv(l, a.backoff, Q16)
      d.flags = d.flags + 1
    elseif d.ok > 0 then
      if a.ctl == 1 then l = gradient2(a, d, avg)
      elseif a.ctl == 2 then l = vegas(a, d, avg)
      else l = aimd(a, d) end
    end
    d.limit = ad_clamp(a, l)
    if math.floor(d.limit / Q16) <= a.min or (d.ok > 0 and math.floor(avg / 2) >= d.noload) then
      if d.stuck < 65535 then d.stuck = d.stuck + 1 end
    else
      d.stuck = 0
    end
    ad_reset(d, now)
    if (a.probe_after ~= 0 and d.stuck >= a.probe_after) or
       (a.probe_every ~= 0 and since(d.pr_s, d.pr_n, now) >= a.probe_every) then
      start_probe(d, now)
    end
    return true
  end

  local function ad_sample(a, d, now, lat, outcome, inflight)
    if lat < 0 then lat = 0 end
    if lat > LAT_MAX then lat = LAT_MAX end
    if d.probing == 1 and since(d.pr_s, d.pr_n, now) < lat then return close_window(a, d, now) end
    if outcome == 2 or (outcome == 0 and a.timeout ~= 0 and lat > a.timeout) then
      local answered = d.flags % 2 == 1 and since(d.ws_s, d.ws_n, now) < lat
      if not answered and d.drops < U32 then d.drops = d.drops + 1 end
    elseif outcome == 0 then
      if ad_fast(d, lat) then
        d.fsum = d.fsum + lat
        d.fok = d.fok + 1
      end
      d.sum = d.sum + lat
      d.ok = d.ok + 1
    end
    if inflight > d.maxin then d.maxin = inflight end
    return close_window(a, d, now)
  end

  local function ad_expired(a, d, now, n, inflight)
    if n == 0 then return end
    if d.probing == 0 then d.drops = math.min(d.drops + n, U32) end
    if inflight > d.maxin then d.maxin = inflight end
    close_window(a, d, now)
  end

  -- ---- adaptive concurrency (ALGO[9]) ----------------------------------------------------------

  local ACONC_KEEP = 900 * E9

  -- The state at now: buckets normalised, expired leases counted as drops, class counts
  -- clamped. Item params: p[1] = max, p[2] = lease, p[3] = bucket width, p[4] = a release's
  -- slot field (slots + class).
  local function aconc_load(st, p, now, a)
    local lease, w = p[2], p[3]
    local s = {}
    local expired
    if st then
      s.base, s.c, s.since, expired = conc_norm(st, lease, w, now)
      s.d = {limit = st[8], noload = st[9], last_avg = st[10], ws_s = st[11], ws_n = st[12], sum = st[13],
             pr_s = st[14], pr_n = st[15], ok = st[16], drops = st[17], maxin = st[18], stuck = st[19],
             probing = st[20], flags = st[21], fsum = st[30] or 0, fok = st[31] or 0}
      s.use = {}
      for i = 1, 8 do s.use[i] = st[21 + i] end
      if expired > 0 then
        local left = conc_sum(s.c)
        ad_expired(a, s.d, now, expired, math.min(left + expired, U32))
        clamp_use(s.use, left)
      end
    else
      s.base, s.c, s.since = conc_norm(nil, lease, w, now)
      s.d = ad_init(a, now)
      s.use = {0, 0, 0, 0, 0, 0, 0, 0}
    end
    return s
  end

  local function aconc_pack(s)
    local d = s.d
    local out = {s.base, s.c[1], s.c[2], s.c[3], s.c[4], s.c[5], s.c[6], d.limit, d.noload, d.last_avg,
                 d.ws_s, d.ws_n, d.sum, d.pr_s, d.pr_n, d.ok, d.drops, d.maxin, d.stuck, d.probing, d.flags}
    for i = 1, 8 do out[21 + i] = s.use[i] end
    out[30], out[31] = d.fsum, d.fok
    return out
  end

  local function aconc_ttl(s, p, now)
    local busy = conc_left(s.c, s.since, p[3], p[2])
    local kept = rel(s.d.ws_s, s.d.ws_n, now.ms, now.mn) + ACONC_KEEP
    local t = busy > kept and busy or kept
    if t < 0 then t = 0 end
    return t
  end

  ALGO[9] = function(st, p, cost, now, op, x)
    local a = x.ad
    local s = aconc_load(st, p, now, a)
    if op == 'd' then
      local used = conc_sum(s.c)
      local cap = ad_limit(a, s.d)
      local fits = cost <= cap and used <= cap - cost
      if not fits or cost == 0 then return fits end
      s.c[NB] = math.min(s.c[NB] + cost, U32)
      return true, aconc_pack(s), aconc_ttl(s, p, now)
    elseif op == 's' then
      if cost > 0 then
        s.c[NB] = math.min(s.c[NB] + cost, U32)
      else
        local need = -cost
        for i = NB, 1, -1 do
          local tk = math.min(s.c[i], need)
          s.c[i] = s.c[i] - tk
          need = need - tk
        end
      end
      clamp_use(s.use, conc_sum(s.c))
      return true, aconc_pack(s), aconc_ttl(s, p, now)
    elseif op == 'l' then
      -- cost = the lease's bucket (mod 2^40), p[4] = its slot field
      local cls = math.floor(p[4] / CLASS_SLOTS) % 8
      local slots = p[4] % CLASS_SLOTS
      if slots == 0 then return false end
      local before = conc_sum(s.c)
      for i = 1, NB do
        if (s.base + i - 1) % 1099511627776 == cost then
          if s.c[i] == 0 then return false end
          s.c[i] = s.c[i] - math.min(slots, s.c[i])
          s.use[cls + 1] = math.max(0, s.use[cls + 1] - slots)
          if x.lat ~= nil then
            local oc = x.outcome
            if oc == 0 and x.lat < 0 then oc = 1 end -- ok of unknown latency: not timed
            ad_sample(a, s.d, now, x.lat, oc, math.min(before, U32))
          end
          return true, aconc_pack(s), aconc_ttl(s, p, now)
        end
      end
      return false
    end
    return false
  end

  -- ---- the penalty of an offender (ALGO[100]) ---------------------------------------------------

  local PEN_LEVEL_MAX = 255

  local function pen_period(q, level)
    if level == 0 then return 0 end
    local d = q.first
    local i = 1
    while i < level and d < q.max do
      local n = muldiv(d, q.factor, Q16)
      if n >= q.max then d = q.max else d = n end
      i = i + 1
    end
    if d > q.max then d = q.max end
    return d
  end

  local function pen_cap(q)
    if q.factor <= Q16 then return 1 end
    local l, d = 1, q.first
    while l < PEN_LEVEL_MAX and d < q.max do
      local n = muldiv(d, q.factor, Q16)
      if n >= q.max then d = q.max else d = n end
      l = l + 1
    end
    return l
  end

  -- levels at now: those held at the last violation minus one per forgive span elapsed since
  -- the end of the period (counted exactly on (s, n) pairs)
  local function pen_level(q, st, now)
    if not st or st[5] == 0 then return 0 end
    local fs, fn = st[1], st[2]
    if rel(st[3], st[4], fs, fn) > 0 then fs, fn = st[3], st[4] end
    if rel(fs, fn, now.ms, now.mn) >= 0 then return st[5] end
    local ds, dn = now.ms - fs, now.mn - fn
    local q1, r1 = muldiv(ds, E9, q.forgive)
    local spans = q1 + idiv(r1 + dn, q.forgive)
    if spans >= st[5] then return 0 end
    return st[5] - spans
  end

  local function pen_action(q, level)
    if level == 0 then return 0 end
    if level <= q.chal then return 2 end
    return 1
  end

  -- A last violation later than now (the clock stepped back): both times move back by that
  -- much (capcodec.c does the same), so a block lasts its own length from the step on, not
  -- the step's length more. Returns the state as of now, and whether it moved.
  local function pen_unstep(st, now)
    if not st or (st[3] == -1 and st[4] == -1) then return st, false end
    local d = rel(st[3], st[4], now.ms, now.mn)
    if d <= 0 then return st, false end
    local us, un = st[1], st[2]
    if not (us == -1 and un == -1) then us, un = at(rel(us, un, now.ms, now.mn) - d, now.ms, now.mn) end
    return {us, un, now.ms, now.mn, st[5]}, true
  end

  -- 0 none, 1 block, 2 challenge
  local function pen_check(q, st, now)
    st = pen_unstep(st, now)
    if not st or st[5] == 0 or not before_pair(now, st[1], st[2]) then return 0 end
    return pen_action(q, st[5])
  end

  local function pen_ttl(q, st, now)
    if not st or st[5] == 0 then return 0 end
    local fs, fn = st[1], st[2]
    if rel(st[3], st[4], fs, fn) > 0 then fs, fn = st[3], st[4] end
    local t = rel(fs, fn, now.ms, now.mn) + st[5] * q.forgive
    if t < 0 then t = 0 end
    return t
  end

  local function pen_violation(q, st, now)
    st = pen_unstep(st, now)
    if st and st[5] > 0 and before_pair(now, st[1], st[2]) then return st end
    local level = pen_level(q, st, now) + 1
    local cap = pen_cap(q)
    if level > cap then level = cap end
    local s, n = at(pen_period(q, level), now.ms, now.mn)
    return {s, n, now.ms, now.mn, level}
  end

  local function pen_pass(q, st, now)
    st = pen_unstep(st, now)
    if not st or st[5] == 0 or not before_pair(now, st[1], st[2]) or pen_action(q, st[5]) ~= 2 then return nil end
    return {now.ms, now.mn, st[3], st[4], st[5]}
  end

  ALGO[100] = function(st, p, cost, now, op, x)
    if op == 's' then
      if not st then return true end
      return true, st, pen_ttl(x.pen, st, now)
    end
    local ns, stepped = pen_unstep(st, now)
    local free = pen_check(x.pen, ns, now) == 0
    if stepped and cost > 0 then return free, ns, pen_ttl(x.pen, ns, now) end
    return free
  end

  -- ---- priority shedding (shed.c, capacity.c) ---------------------------------------------------

  local function share_of(cap, ppm) return muldiv(cap, ppm, PPM) end

  local function shed_room(sp, cap, used, use, c)
    local limit = share_of(cap, sp.fill[c])
    local others = 0
    for j = 1, sp.n do
      if j ~= c then
        local r = share_of(cap, sp.res[j])
        if use then if use[j] >= r then r = 0 else r = r - use[j] end end
        others = others + r
      end
    end
    local free = 0
    if used < cap then free = cap - used end
    local hard = 0
    if free > others then hard = free - others end
    local by_fill = 0
    if used < limit then by_fill = limit - used end
    local shared = by_fill < hard and by_fill or hard
    local own = 0
    if use then
      local res = share_of(cap, sp.res[c])
      if use[c] < res then own = res - use[c] end
      if own > hard then own = hard end
    end
    return shared > own and shared or own
  end

  local function rate_capacity(algo, p)
    if algo == 4 then return p[3] end -- token bucket: burst
    if algo == 5 then return p[2] end -- gcra: burst
    return p[1]                       -- windows: limit
  end

  -- A decision with a class (capacity.c's sl_cap_decide): a concurrency budget's slots per
  -- class, a rate budget's rule as peeks of larger costs. Returns ok, the new state, its
  -- ttl and its new tail (concurrency with classes).
  local function cap_decide(algo, st, tl, p, cost, now, x)
    local sp = x.shed
    local c = x.cls
    if c > sp.n then c = sp.n end
    if algo == 7 or algo == 9 then
      local used, cap, use
      local s
      if algo == 9 then
        s = aconc_load(st, p, now, x.ad)
        used, cap, use = conc_sum(s.c), ad_limit(x.ad, s.d), s.use
      else
        local _, cn = conc_norm(st, p[2], p[3], now)
        used, cap = conc_sum(cn), p[1]
        use = tail_copy(tl or tail_fresh(x.tail)).use
        clamp_use(use, used)
      end
      if cost > shed_room(sp, cap, used, use, c) or cost >= CLASS_SLOTS then return false end
      local a, ns, t = ALGO[algo](st, p, cost, now, 'd', x)
      if not a then return false end
      if cost == 0 or not ns then return true end
      if algo == 9 then
        ns[21 + c] = math.min(ns[21 + c] + cost, U32)
        return true, ns, t
      end
      local nt = tail_copy(tl or tail_fresh(x.tail))
      nt.use = use
      nt.use[c] = math.min(nt.use[c] + cost, U32)
      return true, ns, t, nt
    end
    local cap = rate_capacity(algo, p)
    local others = 0
    for j = 1, sp.n do if j ~= c then others = others + share_of(cap, sp.res[j]) end end
    local ks = {cost, cost + others, cost + (cap - share_of(cap, sp.fill[c]))}
    for i = 1, 3 do
      if (i == 1 or ks[i] ~= cost) and not ALGO[algo](st, p, ks[i], now, 'd', x) then return false end
    end
    return ALGO[algo](st, p, cost, now, 'd', x)
  end

  -- ---- borrowing (borrow.c) ----------------------------------------------------------------------

  -- a tier's use: fixed window (algo 1) or concurrency (algo 7), as limit - remaining
  local function tier_use(algo, st, p, now)
    if algo == 1 then
      local e = wall_mod(now, p[2])
      local count = 0
      if st and rel(st[1], st[2], now.ws, now.wn) >= -e then count = st[3] end
      return math.min(count, p[1])
    end
    local _, cn = conc_norm(st, p[2], p[3], now)
    return math.min(conc_sum(cn), p[1])
  end

  -- sl_borrow_decide over tiers 0 (leaf) .. depth-1 (root); returns admit, the refusing
  -- tier and why (1 cap, 2 full, 3 reclaim), the tier that must reclaim (>= 1) or -1
  local function borrow_decide(tiers, depth, now, cost)
    local in_share_below = true
    local reclaim = -1
    for i = 0, depth - 1 do
      local root = i == depth - 1
      local t = tiers[i]
      local u = t.use
      local room_cap = 0
      if u < t.cap then room_cap = t.cap - u end
      local within = u <= t.share and cost <= t.share - u
      local reclaiming = not root and before_pair(now, tiers[i + 1].marks[1], tiers[i + 1].marks[2])
      local reason = 0
      if cost > room_cap then
        if root then reason = 2 else reason = 1 end
      elseif not within and reclaiming then
        reason = 3
      end
      if reason ~= 0 then
        if in_share_below and reason ~= 3 and i > 0 then reclaim = i end
        return false, i, reason, reclaim
      end
      if within and in_share_below and reclaiming and reclaim < 0 and before_pair(now, t.marks[3], t.marks[4]) then
        reclaim = i + 1
      end
      if not within then in_share_below = false end
    end
    return true, -1, 0, reclaim
  end

  -- the later of a mark and now + span, as a pair
  local function mark_later(ms, mn, now, span)
    local s, n = at(span, now.ms, now.mn)
    if ms == -1 and mn == -1 then return s, n end
    if rel(ms, mn, s, n) > 0 then return ms, mn end
    return s, n
  end

  return cap_x, tail_fresh, cap_split, tail_copy, tail_numbers, clamp_use, pen_ttl, pen_violation, pen_pass, cap_decide, tier_use, borrow_decide, mark_later
end

-- defines the above (and ALGO[9], ALGO[100]) once in this call
local function cap_need()
  if cap_x == nil then
    cap_x, tail_fresh, cap_split, tail_copy, tail_numbers, clamp_use, pen_ttl,
      pen_violation, pen_pass, cap_decide, tier_use, borrow_decide, mark_later
      = cap_load()
  end
end
