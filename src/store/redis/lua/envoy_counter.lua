-- SPDX-License-Identifier: Apache-2.0
-- envoy_counter.lua -- envoyproxy/ratelimit's counter layout (sluice serve --compat
-- envoy-ratelimit): the key names one fixed window (CACHE_KEY_PREFIX + domain + entries +
-- window start, built by the client), its value is a plain integer count, so a key
-- envoyproxy/ratelimit INCRBYs is the same counter. Item params: p[1] = limit, p[2] =
-- the key's life in ms (the unit plus EXPIRATION_JITTER_MAX_SECONDS jitter, picked by the
-- client). State: {count}. Admits iff count + cost <= limit (a count-only item's limit is
-- out of reach: it always counts). Settle (op 's'): count + delta, never below 0.
ALGO[101] = function(st, p, cost, now, op)
  local count = 0
  if st and st[1] then count = st[1] end
  local ttl = p[2] * 1000000
  if op == 's' then
    count = count + cost
    if count < 0 then count = 0 end
    return true, {count}, ttl
  end
  if cost > p[1] then return false end
  if count > p[1] - cost then return false end
  if cost == 0 then return true end
  return true, {count + cost}, ttl
end
