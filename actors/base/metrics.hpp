// Live metrics of one troupe-node process, for Prometheus (prometheus-cpp):
// --metrics.port serves them at http://HOST:PORT/metrics. Every subsystem
// records into one process-wide registry whether or not it is served (an
// atomic add per record), so the call sites need no switch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>

namespace troupe::metrics {

/// Serves this process's metrics at http://host:port/metrics from now on,
/// with troupe_node_info{role} = 1. Returns an empty string, or one line
/// saying why not (the port taken, say). Once per process.
std::string serve(const std::string& host, uint16_t port,
                  const std::string& role);

/// The metric `name` with `labels`, made on first use; the same one for
/// the same name and labels. Keep the reference (a static at the call
/// site): the lookup takes a lock, recording does not.
prometheus::Counter& counter(const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {});
prometheus::Gauge& gauge(const std::string& name, const std::string& help,
                         const prometheus::Labels& labels = {});
/// Buckets: upper bounds in seconds (or whatever `name` measures).
prometheus::Histogram& histogram(const std::string& name,
                                 const std::string& help,
                                 const std::vector<double>& buckets,
                                 const prometheus::Labels& labels = {});

/// Bucket bounds for latencies from 50 µs to 10 s.
const std::vector<double>& latency_buckets();

/// The text a scrape would get now (tests, and a node without a port).
std::string text();

} // namespace troupe::metrics
