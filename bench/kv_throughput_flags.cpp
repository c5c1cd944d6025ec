// kv_throughput's flags: the usage text and reading each flag.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "bench/kv_throughput.hpp"

namespace troupe::bench::kv_throughput {

const char* const usage =
    "usage: kv_throughput [--servers=N] [--mode=async|sync] [--seconds=S]"
    " [--road=all|middleman|tcp|shm] [--rows=all|large|small]"
    " [--road-spin-us=N] [--road-caller-spin-us=N] [--road-frame-spin-us=N]"
    " [--road-reply-conn=on|off]"
    " [--scheduler-only] [--node=PATH] [--tls=DIR]\n"
    "  --road     roads to measure, each on a fresh cluster (default all)\n"
    "  --rows     which rows: the large values (4 KiB..16 MiB), the small"
    " pairs, or all (default all)\n"
    "  --max-message-bytes  the kv client's part size (default: the kv"
    " default, 1 MiB)\n"
    "  --servers  troupe-node servers to start, 1..64 (default 1)\n"
    "  --mode     consistency mode of the servers (default async)\n"
    "  --seconds  timed transfer per row, 0 < S <= 60 (default 0.5)\n"
    "  --road-spin-us  readers of the roads, ours and the servers', poll"
    " this long before they sleep (--road.spin-us; default 0 = off)\n"
    "  --road-caller-spin-us  our blocking kv calls poll this long for"
    " their reply before they sleep (--road.caller-spin-us; default 200,"
    " 0 = off)\n"
    "  --road-frame-spin-us  readers of the roads, ours and the servers',"
    " inside a large frame poll this long for more of it before they sleep"
    " (--road.frame-spin-us; default 50, 0 = off)\n"
    "  --road-reply-conn  our tcp roads get a reply connection of their own"
    " (default on; off: --road.single-conn)\n"
    "  --scheduler-only  our kv client runs on CAF's scheduler threads only"
    " (--kv.scheduler-only), for comparison\n"
    "  --node     troupe-node binary (default: beside this program, then in"
    " its parent dir)\n"
    "  --tls      each road again with mutual TLS on every CAF connection,"
    " certificates from DIR (deploy/make-certs.sh DIR); its rows say"
    " \"tls\"\n";

namespace {

/// Reads a poll time of 0..10000 us for flag `name` into `out`; "" if it
/// is one, else what is wrong.
std::string parse_us(const std::string& name, const std::string& value,
                     uint32_t& out) {
  char* end = nullptr;
  auto n = std::strtoul(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n > 10000)
    return name + " must be 0..10000, got '" + value + "'";
  out = static_cast<uint32_t>(n);
  return "";
}

/// Reads flag `name` if it says what is measured (--servers, --seconds,
/// --mode, --max-message-bytes, --rows, --road): nullopt if it does not,
/// else an error line or "".
std::optional<std::string> parse_setup_flag(const std::string& name,
                                            const std::string& value,
                                            options& opt) {
  char* end = nullptr;
  if (name == "--servers") {
    auto n = std::strtoul(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n < 1 || n > 64)
      return "--servers must be 1..64, got '" + value + "'";
    opt.servers = static_cast<uint32_t>(n);
  } else if (name == "--seconds") {
    opt.seconds = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(opt.seconds > 0) || opt.seconds > 60)
      return "--seconds must be in (0, 60], got '" + value + "'";
  } else if (name == "--mode") {
    if (value != "async" && value != "sync")
      return "--mode must be async or sync, got '" + value + "'";
    opt.mode = value;
  } else if (name == "--max-message-bytes") {
    auto n = std::strtoul(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n < (1u << 16) || n > (1u << 30))
      return "--max-message-bytes must be 65536..1073741824, got '" + value +
             "'";
    opt.max_message_bytes = static_cast<uint32_t>(n);
  } else if (name == "--rows") {
    if (value != "all" && value != "large" && value != "small")
      return "--rows must be all, large or small, got '" + value + "'";
    opt.large_rows = value != "small";
    opt.small_rows = value != "large";
  } else if (name == "--road") {
    if (value != "all" && value != "middleman" && value != "tcp" &&
        value != "shm")
      return "--road must be all, middleman, tcp or shm, got '" + value + "'";
    if (value != "all")
      opt.roads = {value};
  } else {
    return std::nullopt;
  }
  return "";
}

/// Reads flag `a` (`name`=`value`) if it says how the roads and our client
/// wait (--road-*, --scheduler-only) or is --node: nullopt if it does not,
/// else an error line or "".
std::optional<std::string> parse_tuning_flag(const std::string& a,
                                             const std::string& name,
                                             const std::string& value,
                                             options& opt) {
  if (name == "--road-spin-us" || name == "--road-caller-spin-us" ||
      name == "--road-frame-spin-us") {
    auto& out = name == "--road-spin-us"          ? opt.spin_us
                : name == "--road-caller-spin-us" ? opt.caller_spin_us
                                                  : opt.frame_spin_us;
    return parse_us(name, value, out);
  } else if (name == "--road-reply-conn") {
    if (value != "on" && value != "off")
      return "--road-reply-conn must be on or off, got '" + value + "'";
    opt.reply_conn = value == "on";
  } else if (a == "--scheduler-only") {
    opt.scheduler_only = true;
  } else if (name == "--node") {
    if (auto why = not_a_node(value); !why.empty())
      return why;
    opt.node = value;
  } else if (name == "--tls") {
    if (::access((value + "/ca.pem").c_str(), R_OK) != 0)
      return "--tls: no ca.pem in '" + value +
             "' (make one with deploy/make-certs.sh DIR)";
    opt.tls_dir = value;
  } else {
    return std::nullopt;
  }
  return "";
}

} // namespace

std::string parse_flags(const std::vector<std::string>& args, options& opt) {
  for (auto& a : args) {
    auto eq = std::min(a.find('='), a.size());
    auto name = a.substr(0, eq);
    auto value = a.substr(std::min(eq + 1, a.size()));
    auto msg = parse_setup_flag(name, value, opt);
    if (!msg)
      msg = parse_tuning_flag(a, name, value, opt);
    if (!msg)
      return "unknown flag '" + a + "' (see --help)";
    if (!msg->empty())
      return *msg;
  }
  return "";
}

} // namespace troupe::bench::kv_throughput
