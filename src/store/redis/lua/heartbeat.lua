-- SPDX-License-Identifier: Apache-2.0
-- heartbeat.lua -- on_store_error: local (src/store/redis/local.c). One hash per deployment,
-- KEYS[1], one field per instance: ARGV[1] its identity, the value "<expiry ms> <demand>"
-- where <demand> (ARGV[3]) is "slot:count ..." (decisions over the demand window per
-- policy slot). ARGV[2] is the TTL in ms: a field older than that is an instance gone and
-- is deleted; the hash itself expires when every instance is gone. Returns the live
-- fields and values (this instance's included): the view every instance keeps.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], (now + ttl) .. ' ' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^(%d+)'))
  if exp == nil or exp < now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
