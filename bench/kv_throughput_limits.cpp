// kv_throughput's limits of this machine, measured in the same run: plain
// TCP's GB/s on loopback and raw round trips per second.
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "bench/kv_throughput.hpp"
#include "bench/round_trips.hpp"

namespace troupe::bench::kv_throughput {

caf::expected<double> tcp_loopback_gbps(double seconds) {
  int wfd, rfd;
  if (!bench::connect_loopback_tcp(wfd, rfd))
    return sys_error("connecting on loopback");
  auto t0 = steady::now();
  std::thread writer{[wfd, seconds, t0] {
    std::vector<char> buf(4u << 20, 'x');
    for (ssize_t n = 0; n >= 0 && since(t0) < seconds;)
      for (size_t off = 0; n >= 0 && off < buf.size(); off += n)
        n = ::write(wfd, buf.data() + off, buf.size() - off);
    ::shutdown(wfd, SHUT_WR);
  }};
  std::vector<char> buf(4u << 20);
  uint64_t bytes = 0;
  for (ssize_t n; (n = ::read(rfd, buf.data(), buf.size())) > 0;)
    bytes += static_cast<uint64_t>(n);
  auto secs = since(t0);
  writer.join();
  ::close(rfd);
  ::close(wfd);
  return bytes / secs / 1e9;
}

caf::expected<rt_limits> measure_rt_limits(double seconds) {
  rt_limits out;
  double* slots[] = {&out.unix_1, &out.unix_8, &out.tcp_1, &out.tcp_8};
  size_t i = 0;
  for (auto kind : {bench::rt_socket::unix_pair, bench::rt_socket::tcp})
    for (size_t depth : {1, 8}) {
      auto r = bench::round_trips_per_s(kind, depth, seconds);
      if (r.per_s < 0)
        return caf::make_error(errc::not_connected, "raw round trips:", r.why);
      *slots[i++] = r.per_s;
    }
  return out;
}

} // namespace troupe::bench::kv_throughput
