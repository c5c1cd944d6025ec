// The scheduler's status page; see status_page.hpp.
#include "actors/scheduler/status_page.hpp"

#include <CivetServer.h>

#include <nlohmann/json.hpp>

#include "actors/base/http_threads.hpp"

namespace troupe {

namespace {

constexpr size_t max_events = 300;
constexpr size_t max_progress = 20000;

nlohmann::json member_json(const node_info& n, const char* kind,
                           const std::vector<event_record>& events) {
  nlohmann::json m{{"role", kind},
                   {"rank", n.rank},
                   {"host", n.host},
                   {"pid", n.pid},
                   {"health", "live"}};
  // Its last event says how it got here (joined, rejoined, promoted...).
  for (auto e = events.rbegin(); e != events.rend(); ++e)
    if (e->rank == n.rank && std::string{to_string(e->about)} == kind &&
        e->kind != "progress") {
      m["last_event"] = e->kind;
      m["last_event_ms"] = e->at_ms;
      break;
    }
  return m;
}

} // namespace

struct status_page::handler : CivetHandler {
  status_page* page;
  explicit handler(status_page* p) : page(p) {
    // empty
  }
  bool handleGet(CivetServer*, struct mg_connection* conn) override {
    return answer(conn, true);
  }
  /// What a GET has, without its body (what uptime checks ask).
  bool handleHead(CivetServer*, struct mg_connection* conn) override {
    return answer(conn, false);
  }
  bool handlePost(CivetServer*, struct mg_connection* conn) override {
    return refuse(conn);
  }
  bool handlePut(CivetServer*, struct mg_connection* conn) override {
    return refuse(conn);
  }
  bool handleDelete(CivetServer*, struct mg_connection* conn) override {
    return refuse(conn);
  }
  bool handleOptions(CivetServer*, struct mg_connection* conn) override {
    return refuse(conn);
  }
  bool handlePatch(CivetServer*, struct mg_connection* conn) override {
    return refuse(conn);
  }

private:
  /// The page, its JSON, or 404; with the body or without.
  bool answer(struct mg_connection* conn, bool with_body) {
    auto* info = mg_get_request_info(conn);
    std::string uri = info && info->local_uri ? info->local_uri : "/";
    std::string body, type;
    if (uri == "/status.json") {
      body = page->json();
      type = "application/json";
    } else if (uri == "/" || uri == "/index.html") {
      body = html();
      type = "text/html; charset=utf-8";
    } else {
      return write(conn, "404 Not Found", "no such page: try /\n", with_body);
    }
    return write(conn, "200 OK", body, with_body, type);
  }

  /// The page is read only.
  static bool refuse(struct mg_connection* conn) {
    return write(conn, "405 Method Not Allowed",
                 "the status page is read with GET or HEAD\n", true,
                 "text/plain", "Allow: GET, HEAD\r\n");
  }

  /// The answer is made here and only written by civetweb (mg_printf alone
  /// takes 8 KiB of a thread's stack).
  static bool write(struct mg_connection* conn, const std::string& status,
                    const std::string& body, bool with_body,
                    const std::string& type = "text/plain",
                    const std::string& more = "") {
    auto head = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                more + "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
    mg_write(conn, head.data(), head.size());
    if (with_body)
      mg_write(conn, body.data(), body.size());
    return true;
  }
};

std::shared_ptr<status_page>
status_page::start(const std::string& host, uint16_t port, std::string& why) {
  std::shared_ptr<status_page> page{new status_page};
  page->handler_ = std::make_unique<handler>(page.get());
  auto options = http_options(host + ":" + std::to_string(port));
  page->publish(); // an empty view until the first: never no JSON
  try {
    page->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    why = "--cluster.status-port=" + std::to_string(port) +
          ": cannot serve on " + host + ":" + std::to_string(port) + " (" +
          e.what() + "; is the port taken?)";
    return nullptr;
  }
  page->server_->addHandler("/", *page->handler_);
  return page;
}

status_page::~status_page() {
  if (server_)
    server_->close(); // its threads stop before the handler goes
}

void status_page::set_view(const cluster_view& v) {
  view_ = v;
  publish();
}

void status_page::add_event(const event_record& e) {
  if (e.kind == "progress") {
    if (progress_.size() < max_progress)
      progress_.push_back(e);
  } else {
    if (events_.size() == max_events)
      events_.erase(events_.begin(), events_.begin() + max_events / 3);
    events_.push_back(e);
  }
  publish();
}

std::string status_page::json() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return snapshot_;
}

void status_page::publish() {
  auto text = render();
  std::lock_guard<std::mutex> guard{mtx_};
  snapshot_ = std::move(text);
}

std::string status_page::render() const {
  nlohmann::json out;
  out["epoch"] = view_.epoch;
  out["expected_workers"] = view_.expected_workers;
  out["given_up"] = view_.given_up; // worker ranks no process comes back to
  out["ended"] = view_.ended;
  out["finished"] = view_.finished; // did their work and left
  auto& members = out["members"] = nlohmann::json::array();
  for (auto& s : view_.servers)
    members.push_back(member_json(s, "server", events_));
  for (auto& w : view_.workers)
    members.push_back(member_json(w, "worker", events_));
  auto& evs = out["events"] = nlohmann::json::array();
  for (auto& e : events_)
    evs.push_back(nlohmann::json::parse(to_json(e)));
  // Rank 0's "progress" details read "epoch=E loss=L accuracy=A ...".
  auto& curve = out["progress"] = nlohmann::json::array();
  for (auto& e : progress_) {
    nlohmann::json p{{"at_ms", e.at_ms}};
    std::string d = e.detail;
    size_t at = 0;
    while (at < d.size()) {
      auto end = d.find(' ', at);
      auto word = d.substr(at, end == std::string::npos ? end : end - at);
      auto eq = word.find('=');
      if (eq != std::string::npos) {
        char* stop = nullptr;
        auto x = std::strtod(word.c_str() + eq + 1, &stop);
        if (stop != word.c_str() + eq + 1)
          p[word.substr(0, eq)] = x;
      }
      if (end == std::string::npos)
        break;
      at = end + 1;
    }
    curve.push_back(p);
  }
  return out.dump();
}

} // namespace troupe
