// The process's metrics registry and its HTTP exposer; see metrics.hpp.
#include "actors/base/metrics.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "actors/base/http_threads.hpp"

namespace troupe::metrics {

namespace {

struct state {
  std::mutex mtx;
  std::shared_ptr<prometheus::Registry> registry =
      std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  // Families by name: prometheus-cpp refuses a second family of one name.
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms;
};

state& the() {
  static state s; // lives until exit: exposer threads read the registry
  return s;
}

} // namespace

std::string serve(const std::string& host, uint16_t port,
                  const std::string& role) {
  auto& s = the();
  std::lock_guard<std::mutex> guard{s.mtx};
  if (s.exposer)
    return "--metrics.port: already serving";
  auto where = host + ":" + std::to_string(port);
  try {
    s.exposer = std::make_unique<prometheus::Exposer>(http_options(where));
  } catch (const std::exception& e) {
    return "--metrics.port=" + std::to_string(port) + ": cannot serve on " +
           where + " (" + e.what() + "; is the port taken?)";
  }
  s.exposer->RegisterCollectable(s.registry);
  prometheus::BuildGauge()
      .Name("troupe_node_info")
      .Help("1, with the node's role as a label")
      .Register(*s.registry)
      .Add({{"role", role}})
      .Set(1);
  return {};
}

prometheus::Counter& counter(const std::string& name, const std::string& help,
                             const prometheus::Labels& labels) {
  auto& s = the();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto& f = s.counters[name];
  if (f == nullptr)
    f = &prometheus::BuildCounter().Name(name).Help(help).Register(*s.registry);
  return f->Add(labels);
}

prometheus::Gauge& gauge(const std::string& name, const std::string& help,
                         const prometheus::Labels& labels) {
  auto& s = the();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto& f = s.gauges[name];
  if (f == nullptr)
    f = &prometheus::BuildGauge().Name(name).Help(help).Register(*s.registry);
  return f->Add(labels);
}

prometheus::Histogram& histogram(const std::string& name,
                                 const std::string& help,
                                 const std::vector<double>& buckets,
                                 const prometheus::Labels& labels) {
  auto& s = the();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto& f = s.histograms[name];
  if (f == nullptr)
    f = &prometheus::BuildHistogram().Name(name).Help(help).Register(
        *s.registry);
  return f->Add(labels, buckets);
}

const std::vector<double>& latency_buckets() {
  static const std::vector<double> xs{
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
      50e-3, 0.1,    0.25,   0.5,    1.0,  2.5,    5.0,  10.0};
  return xs;
}

std::string text() {
  auto& s = the();
  std::lock_guard<std::mutex> guard{s.mtx};
  std::ostringstream out;
  prometheus::TextSerializer{}.Serialize(out, s.registry->Collect());
  return out.str();
}

} // namespace troupe::metrics
