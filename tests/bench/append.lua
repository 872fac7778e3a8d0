-- tests/bench/append.lua — wrk script: each thread appends the body file (a
-- POST /v1/sessions/{id}/kv body) to its own session, the ids taken in turn
-- from ATTND_SIDS (space-separated). Prints one wrk_result line as
-- ../shared/bench/wrk/post_json.lua does.
local n = 0
setup = function(thread)
   local ids = {}
   for id in string.gmatch(os.getenv("ATTND_SIDS") or "", "%S+") do
      ids[#ids + 1] = id
   end
   n = n + 1
   thread:set("sid", ids[(n - 1) % #ids + 1])
end

init = function(args)
   local f = assert(io.open(args[1], "rb"))
   wrk.body = f:read("*a")
   f:close()
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
end

request = function()
   return wrk.format(nil, "/v1/sessions/" .. sid .. "/kv")
end

done = function(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "wrk_result requests=%d duration_s=%.3f rps=%.1f p50_ms=%.3f p99_ms=%.3f err_status=%d err_other=%d\n",
      summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
      latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, e.status,
      e.connect + e.read + e.write + e.timeout))
end
