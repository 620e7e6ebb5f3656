-- SPDX-License-Identifier: Apache-2.0
-- sluice.lua -- HAProxy 2.6+ (Debian's haproxy): `http-request lua.sluice_auth` asks
-- sluice's /v1/auth about the request (method, URI, host, client address and every
-- header, no body) with HAProxy's own HTTP client, then:
--   admitted   -> the request goes on; txn.sluice_ratelimit / txn.sluice_ratelimit_policy
--                 hold the RateLimit fields for http-after-response to add
--   limited    -> sluice's answer goes to the client as it is (status, Retry-After,
--                 RateLimit fields, problem+json body with the policy and the trace id)
--   no answer  -> txn.sluice_unreachable is set; haproxy.cfg fails open or closed
-- The client does not connect to sluice itself: it goes through haproxy.cfg's
-- `sluice_gate` frontend (an abstract socket) to `backend sluice`, whose servers, health
-- checks and timeouts are ordinary HAProxy configuration. (HAProxy 2.6's client retries a
-- refused connection for seconds and has no connect timeout of its own.)
local gate = "abns@" .. (os.getenv("SLUICE_GATE") or "sluice-gate")
local url = "http://sluice/v1/auth"
local timeout_ms = 10000 -- a bound of last resort; backend sluice's timeouts come first

-- Headers that describe this hop, not the request: never forwarded to sluice.
local hop = { ["connection"] = true, ["content-length"] = true, ["transfer-encoding"] = true,
              ["host"] = true, ["keep-alive"] = true, ["te"] = true, ["upgrade"] = true,
              ["expect"] = true, ["proxy-connection"] = true }
-- sluice's answer headers that reach the client when it limits.
local passed = { "retry-after", "ratelimit", "ratelimit-policy", "content-type",
                 "cache-control", "x-ratelimit-limit", "x-ratelimit-remaining",
                 "x-ratelimit-reset" }

local function first(headers, name)
    local v = headers and headers[name]
    if type(v) == "table" then return v[1] or v[0] end
    return v
end

core.register_action("sluice_auth", { "http-req" }, function(txn)
    local out = {}
    -- req_get_headers(): name -> values indexed from 0
    for name, values in pairs(txn.http:req_get_headers()) do
        local n = string.lower(name)
        if not hop[n] and not n:find("^x%-original%-") and not n:find("^x%-forwarded%-") and
           n ~= "x-sluice-route" then -- a client never names its own route
            local list = {}
            for i = 0, #values do
                if values[i] ~= nil then list[#list + 1] = values[i] end
            end
            out[n] = list
        end
    end
    out["x-original-method"] = { txn.sf:method() }
    out["x-original-uri"] = { txn.sf:url() }
    out["x-forwarded-host"] = { txn.sf:req_hdr("host") }
    out["x-forwarded-for"] = { txn.sf:src() }
    -- the route name (sluice's key part `route`): haproxy.cfg's txn.sluice_route
    local route = txn:get_var("txn.sluice_route")
    if route ~= nil and route ~= "" then out["x-sluice-route"] = { route } end

    local ok, res = pcall(function()
        return core.httpclient():get{ url = url, dst = gate, headers = out, timeout = timeout_ms }
    end)
    local h = ok and res and res.headers or {}
    -- No answer from sluice itself: the client failed, or HAProxy made up an error
    -- (503 when no sluice server can be reached, 504 on backend sluice's timeout). sluice
    -- signs its answers with "Server: sluice", its own 503 (a policy failing closed) too.
    if not ok or res == nil or res.status == nil or first(h, "server") ~= "sluice" then
        txn:set_var("txn.sluice_unreachable", 1)
        return
    end
    if res.status >= 200 and res.status < 300 then
        local rl, rlp = first(h, "ratelimit"), first(h, "ratelimit-policy")
        if rl then txn:set_var("txn.sluice_ratelimit", rl) end
        if rlp then txn:set_var("txn.sluice_ratelimit_policy", rlp) end
        return
    end
    local reply = txn:reply{ status = res.status }
    for _, name in ipairs(passed) do
        local v = first(h, name)
        if v then reply:add_header(name, v) end
    end
    reply:set_body(res.body or "")
    txn:done(reply)
end, 0)
