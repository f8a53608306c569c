// `spyre-smi exporter`: a minimal HTTP/1.0 server on 127.0.0.1 that answers GET /metrics with
// the Prometheus text format. One request at a time; every scrape queries the cards afresh.
#pragma once

#include <functional>
#include <string>

namespace spyre_smi {

// Serves until max_requests requests were answered (0: forever). port 0 picks a free port.
// Prints "listening on http://127.0.0.1:PORT/metrics" to stderr once bound. Returns 0, or 1
// with a message on stderr if the port cannot be bound.
int serve_metrics(int port, long max_requests, const std::function<std::string()>& metrics);

}  // namespace spyre_smi
