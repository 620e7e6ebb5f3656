-- SPDX-License-Identifier: Apache-2.0
-- check_keys.lua -- wrk script for bench/run_server.sh: POST /v1/check naming the policy
-- "bench" and the key "user:<n>", n cycling through NKEYS keys (from a per-thread random
-- start), the requests pre-formatted in init (one table index per request in wrk).
-- Usage: wrk ... -s check_keys.lua URL -- NKEYS
local pool, count, at = {}, 0, 0

function init(args)
  count = tonumber(args[1] or "100000")
  for k = 1, count do
    pool[k] = wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
                         '{"policy":"bench","key":"user:' .. k .. '"}')
  end
  at = (os.time() * 7919 + count) % count
end

function request()
  at = at % count + 1
  return pool[at]
end
