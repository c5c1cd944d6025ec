// time_to_accuracy's flags: the usage text, reading each flag, and where
// the troupe-node binary is.
#include <unistd.h>

#include <algorithm>

#include "actors/cluster/consistency.hpp"
#include "bench/time_to_accuracy.hpp"

namespace troupe::bench::time_to_accuracy {

const char* const usage =
    "usage: time_to_accuracy [--epochs=E] [--modes=M,...] [--workers=W,...]"
    " [--servers=S] [--node=PATH] [--node-arg=FLAG ...] [--tls=DIR]\n"
    "  --epochs   passes over the training set per run, 1..100 (default 10)\n"
    "  --modes    server modes: sync, async, ssp:S; async+pipe and ssp:S+pipe\n"
    "             add pipelined workers (--worker.pipeline: step t+1 runs\n"
    "             while push t is in flight); sync+overlap and async+overlap\n"
    "             overlapped ones (--worker.overlap: each block of gradients\n"
    "             is pushed as backward finishes it; no helper threads)\n"
    "             (default sync,async,ssp:2,async+pipe,sync+overlap)\n"
    "  --workers  worker counts, each 1..16 (default 1,2)\n"
    "  --servers  server processes per cluster, 1..16 (default 1; with 2\n"
    "             or more each replicates to the next, as --server.replicas\n"
    "             says)\n"
    "  --node     troupe-node binary (default: beside this program)\n"
    "  --node-arg a flag for every server and worker, e.g.\n"
    "             --node-arg=--server.helper-threads=0 (repeatable)\n"
    "  --tls      each row twice: plain text, then mutual TLS with the\n"
    "             certificates in DIR (deploy/make-certs.sh DIR); rows\n"
    "             with TLS say \"tls\" after the mode\n"
    "A run not done in 60 s + 30 s per epoch is killed; its row fails.\n";

std::pair<std::string, stepping> split_mode(const std::string& m) {
  for (auto [suffix, how] : {std::pair{"+pipe", stepping::pipe},
                             std::pair{"+overlap", stepping::overlap}}) {
    std::string sfx = suffix;
    if (m.size() > sfx.size() &&
        m.compare(m.size() - sfx.size(), sfx.size(), sfx) == 0)
      return {m.substr(0, m.size() - sfx.size()), how};
  }
  return {m, stepping::whole};
}

namespace {

/// The number in all of `s` if it is in [1, hi], else 0.
uint32_t parse_count(const std::string& s, uint32_t hi) {
  if (s.empty() || s.size() > 3 ||
      s.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  auto n = uint32_t(std::stoul(s));
  return n <= hi ? n : 0;
}

/// `value` cut at commas.
std::vector<std::string> comma_items(const std::string& value) {
  std::vector<std::string> items{""};
  for (char c : value)
    if (c == ',')
      items.emplace_back();
    else
      items.back().push_back(c);
  return items;
}

/// Reads --modes; returns an error line, or "".
std::string parse_modes(const std::string& value, options& opt) {
  for (auto& m : (opt.modes = comma_items(value))) {
    auto [server_mode, how] = split_mode(m);
    auto c = parse_consistency(server_mode);
    if (!c || (how == stepping::pipe && c->kind == consistency::kind_t::sync) ||
        (how == stepping::overlap && c->kind == consistency::kind_t::ssp))
      return "--modes must list sync, async, ssp:S, async+pipe, "
             "ssp:S+pipe, sync+overlap or async+overlap, got '" +
             value + "'";
  }
  return "";
}

/// Reads --workers; returns an error line, or "".
std::string parse_workers(const std::string& value, options& opt) {
  opt.workers.clear();
  for (auto& w : comma_items(value))
    if (opt.workers.emplace_back(parse_count(w, 16)) == 0)
      return "--workers must list counts 1..16, got '" + value + "'";
  return "";
}

} // namespace

std::string parse_flag(const std::string& a, options& opt) {
  auto eq = std::min(a.find('='), a.size());
  auto name = a.substr(0, eq), value = a.substr(std::min(eq + 1, a.size()));
  if (name == "--epochs" && (opt.epochs = parse_count(value, 100)) == 0)
    return "--epochs must be 1..100, got '" + value + "'";
  if (name == "--modes")
    if (auto err = parse_modes(value, opt); !err.empty())
      return err;
  if (name == "--workers")
    if (auto err = parse_workers(value, opt); !err.empty())
      return err;
  if (name == "--servers" && (opt.servers = parse_count(value, 16)) == 0)
    return "--servers must be 1..16, got '" + value + "'";
  if (name == "--node")
    if (auto why = not_a_node(opt.node = value); !why.empty())
      return why;
  if (name == "--node-arg") {
    if (value.size() < 3 || value.compare(0, 2, "--") != 0)
      return "--node-arg must be a troupe-node flag such as "
             "--node-arg=--server.helper-threads=0, got '" +
             value + "'";
    opt.node_args.push_back(value);
  }
  if (name == "--tls" && ::access((value + "/ca.pem").c_str(), R_OK) != 0)
    return "--tls: no ca.pem in '" + value +
           "' (make one with deploy/make-certs.sh DIR)";
  if (name == "--tls")
    opt.tls_dir = value;
  if (name != "--epochs" && name != "--modes" && name != "--workers" &&
      name != "--servers" && name != "--node" && name != "--node-arg" &&
      name != "--tls")
    return "unknown flag '" + a + "' (see --help)";
  return "";
}

std::string default_node_path(std::string& err) {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string dir{buf, size_t(std::max(n, ssize_t{0}))};
  auto path = dir.substr(0, dir.rfind('/') + 1) + "troupe-node";
  if (n > 0 && ::access(path.c_str(), X_OK) == 0)
    return path;
  err = "no troupe-node at '" + path + "'; pass --node=PATH";
  return "";
}

} // namespace troupe::bench::time_to_accuracy
