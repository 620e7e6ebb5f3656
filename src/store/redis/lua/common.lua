-- SPDX-License-Identifier: Apache-2.0
-- common.lua -- helpers shared by the sluice algorithm scripts. codec.c composes
-- common.lua, every algorithm file, capacity.lua, fast.lua and main.lua (in that order)
-- into a function library (FUNCTION LOAD, called with FCALL: main.lua is the function's
-- body, the rest runs once at load) and into one script (SCRIPT LOAD, EVALSHA: Redis 6 or
-- no FUNCTION command; its whole body runs at every call). Lua numbers are doubles: every value is an
-- integer below 2^53, absolute times are kept as (seconds, nanoseconds) pairs and all
-- arithmetic is done on times relative to "now" (small), products through exact helpers.
local E9 = 1000000000
local MICRO = 1000000
local BIG = 4503599627370496 -- 2^52: relative times are clamped to +-BIG
local SPLIT = 134217729      -- 2^27 + 1 (Veltkamp)
local ALGO = {}

-- a*b as p + e exactly (a, b integers, |a|, |b| < 2^53). A product below 2^53 in
-- magnitude is exact already (rounding is monotonic and 2^53 is a double: a rounded
-- product below it was one), the common case, so the split is skipped.
local EXACT = 9007199254740992 -- 2^53
local function twoprod(a, b)
  local p = a * b
  if p < EXACT and p > -EXACT then return p, 0 end
  local c = SPLIT * a
  local ah = c - (c - a)
  local al = a - ah
  c = SPLIT * b
  local bh = c - (c - b)
  local bl = b - bh
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
end

-- floor(a / b) for integers, b > 0, |a| < 2^53
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- floor(a*b/c) and the remainder, a, b >= 0, c > 0; exact while the quotient < 2^53
local function muldiv(a, b, c)
  local p, e = twoprod(a, b)
  local q = math.floor(p / c)
  if q >= BIG then return BIG, 0 end
  local qp, qe = twoprod(q, c)
  local r = (p - qp) + (e - qe)
  while r < 0 do q = q - 1; r = r + c end
  while r >= c do q = q + 1; r = r - c end
  return q, r
end

-- sign of a*b - c*d (all >= 0)
local function cmpmul(a, b, c, d)
  local p1, e1 = twoprod(a, b)
  local p2, e2 = twoprod(c, d)
  if p1 ~= p2 then return p1 < p2 and -1 or 1 end
  if e1 ~= e2 then return e1 < e2 and -1 or 1 end
  return 0
end

-- (s, n) - (s0, n0) in ns, clamped to +-BIG
local function rel(s, n, s0, n0)
  local ds = s - s0
  if ds > 4000000 then return BIG end
  if ds < -4000000 then return -BIG end
  return ds * E9 + (n - n0)
end

-- the pair for (s0, n0) + d ns
local function at(d, s0, n0)
  local t = n0 + d
  local q = idiv(t, E9)
  return s0 + q, t - q * E9
end

-- (wall) mod p, for the windows aligned on multiples of p since the Unix epoch
local function wall_mod(now, p)
  local x = now.ws % p
  local _, r = muldiv(x, E9, p)
  return (r + now.wn) % p
end
