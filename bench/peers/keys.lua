-- SPDX-License-Identifier: Apache-2.0
-- keys.lua -- wrk script for bench/run_server.sh: every request carries X-Api-Key
-- "user:<n>" for n cycling through NKEYS keys (from a per-thread random start), with the
-- requests pre-formatted in init so the per-request cost in wrk is one table index.
-- Usage: wrk ... -s keys.lua URL -- NKEYS
local pool, count, at = {}, 0, 0

function init(args)
  count = tonumber(args[1] or "100000")
  for k = 1, count do
    pool[k] = wrk.format("GET", nil, { ["X-Api-Key"] = "user:" .. k })
  end
  at = (os.time() * 7919 + count) % count
end

function request()
  at = at % count + 1
  return pool[at]
end
