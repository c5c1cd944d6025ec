// The cluster view as metrics; see view_metrics.hpp.
#include "actors/cluster/view_metrics.hpp"

#include "actors/base/metrics.hpp"

namespace troupe {

void note_view(const cluster_view& v) {
  static auto& epoch = metrics::gauge(
      "troupe_view_epoch", "epoch of the newest cluster view this node holds");
  static auto& servers = metrics::gauge(
      "troupe_members", "live members in that view", {{"role", "server"}});
  static auto& workers = metrics::gauge(
      "troupe_members", "live members in that view", {{"role", "worker"}});
  epoch.Set(double(v.epoch));
  servers.Set(double(v.servers.size()));
  workers.Set(double(v.workers.size()));
}

} // namespace troupe
