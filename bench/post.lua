-- wrk script: POST the AdmissionReview in the file named after `--`, as JSON.
-- `done` prints one line "BENCH {...}" that bench/webhook.py reads.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function init(args)
  local f = assert(io.open(args[1], "rb"))
  wrk.body = f:read("*a")
  f:close()
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max))
end
