// troupe-plot: draws the curves of a job from its metrics.jsonl (rank 0's
// lines, --train.metrics-file) into one self-contained HTML file: train
// loss, test accuracy and samples/s against epochs, as inline SVG, so a
// user can look rather than read. A null value (no steps in that part, a
// diverged loss) leaves a gap.
//
// usage: troupe-plot METRICS.jsonl [OUT.html]   (default: curves.html
//        beside the metrics file)
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

/// One metrics line: the epoch and what it measured (absent: null).
struct point {
  double epoch = 0;
  std::optional<double> loss, accuracy, rate;
};

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number())
    return std::nullopt;
  return j[key].get<double>();
}

/// The points of `path`, or an error naming the file and line.
bool read_points(const std::string& path, std::vector<point>& out,
                 std::string& error) {
  std::ifstream in{path};
  if (!in) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty())
      continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !number_at(j, "epoch")) {
      error = path + ":" + std::to_string(n) +
              ": not a metrics line (a JSON object with an epoch)";
      return false;
    }
    auto epoch = *number_at(j, "epoch");
    if (!out.empty() && epoch < out.back().epoch) // drawn, but said
      std::cerr << "*** warning: " << path << ":" << n << ": epoch " << epoch
                << " after epoch " << out.back().epoch
                << ": more than one job's lines in one file? The curves mix"
                   " them\n";
    out.push_back(point{epoch, number_at(j, "train_loss"),
                        number_at(j, "test_accuracy"),
                        number_at(j, "samples_per_s")});
  }
  if (out.empty()) {
    error = path + ": no metrics lines (did rank 0 report an epoch?)";
    return false;
  }
  return true;
}

/// `text` for an HTML page: a path with < or & stays text.
std::string html_text(const std::string& text) {
  std::string out;
  for (char c : text)
    out += c == '<'   ? "&lt;"
           : c == '>' ? "&gt;"
           : c == '&' ? "&amp;"
                      : std::string(1, c);
  return out;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

/// One chart: `pick`'s values against the epoch, as an SVG of 640 x 280
/// with its range on the axes; consecutive points join, a missing one
/// breaks the line.
template <class Pick>
std::string chart(const std::vector<point>& ps, const std::string& title,
                  Pick pick) {
  constexpr double w = 640, h = 280, left = 70, right = 20, top = 30,
                   bottom = 40;
  double x0 = ps.front().epoch, x1 = ps.front().epoch;
  double y0 = INFINITY, y1 = -INFINITY;
  for (auto& p : ps) {
    x0 = std::min(x0, p.epoch);
    x1 = std::max(x1, p.epoch);
    if (auto y = pick(p)) {
      y0 = std::min(y0, *y);
      y1 = std::max(y1, *y);
    }
  }
  std::ostringstream svg;
  svg << "<h2>" << title << "</h2>\n<svg class=\"chart\" width=\"" << w
      << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << ' ' << h << "\">\n";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\""
      << w - left - right << "\" height=\"" << h - top - bottom
      << "\" fill=\"none\" stroke=\"#999\"/>\n";
  if (!(y0 <= y1)) {
    svg << "<text x=\"" << left + 10 << "\" y=\"" << h / 2
        << "\">no values</text>\n</svg>\n";
    return svg.str();
  }
  if (x1 == x0)
    x1 = x0 + 1;
  if (y1 == y0)
    y1 = y0 + 1;
  auto sx = [&](double x) {
    return left + (x - x0) / (x1 - x0) * (w - left - right);
  };
  auto sy = [&](double y) {
    return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom);
  };
  std::string run;
  auto flush = [&] {
    if (!run.empty())
      svg << "<polyline fill=\"none\" stroke=\"#1f6feb\" stroke-width=\"2\" "
             "points=\""
          << run << "\"/>\n";
    run.clear();
  };
  for (auto& p : ps) {
    auto y = pick(p);
    if (!y) {
      flush();
      continue;
    }
    run += fixed(sx(p.epoch), 1) + ',' + fixed(sy(*y), 1) + ' ';
    svg << "<circle cx=\"" << fixed(sx(p.epoch), 1) << "\" cy=\""
        << fixed(sy(*y), 1) << "\" r=\"3\" fill=\"#1f6feb\"><title>epoch "
        << p.epoch << ": " << *y << "</title></circle>\n";
  }
  flush();
  svg << "<text x=\"4\" y=\"" << top + 10 << "\">" << fixed(y1, 4)
      << "</text>\n<text x=\"4\" y=\"" << h - bottom << "\">" << fixed(y0, 4)
      << "</text>\n<text x=\"" << left << "\" y=\"" << h - 10 << "\">epoch "
      << x0 << "</text>\n<text x=\"" << w - right - 80 << "\" y=\"" << h - 10
      << "\">epoch " << x1 << "</text>\n</svg>\n";
  return svg.str();
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string{argv[1]} == "--help") {
    std::cerr << "usage: troupe-plot METRICS.jsonl [OUT.html]\n";
    return argc == 2 ? 0 : 2;
  }
  std::string in = argv[1];
  std::string out = argc == 3 ? argv[2] : [&in] {
    auto slash = in.rfind('/');
    return (slash == std::string::npos ? std::string{}
                                       : in.substr(0, slash + 1)) +
           "curves.html";
  }();
  std::error_code ec;
  if (std::filesystem::is_directory(in, ec)) {
    std::cerr << "*** " << in << " is a folder: name its metrics file"
              << " (metrics.jsonl)\n";
    return 2;
  }
  if (std::filesystem::equivalent(in, out, ec)) {
    std::cerr << "*** " << out << " is the metrics file itself: not"
              << " replaced; name another OUT.html\n";
    return 2;
  }
  std::vector<point> ps;
  std::string error;
  if (!read_points(in, ps, error)) {
    std::cerr << "*** " << error << '\n';
    return 1;
  }
  std::ofstream html{out};
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
          "troupe: "
       << html_text(in)
       << "</title><style>body{font-family:sans-serif}svg{display:block}"
          "</style></head><body>\n<h1>"
       << html_text(in) << "</h1>\n<p>" << ps.size() << " points</p>\n"
       << chart(ps, "train loss", [](const point& p) { return p.loss; })
       << chart(ps, "test accuracy", [](const point& p) { return p.accuracy; })
       << chart(ps, "samples/s", [](const point& p) { return p.rate; })
       << "</body></html>\n";
  html.flush();
  if (!html) {
    std::cerr << "*** cannot write " << out << ": " << std::strerror(errno)
              << '\n';
    return 1;
  }
  std::printf("%zu points from %s drawn in %s\n", ps.size(), in.c_str(),
              out.c_str());
  return 0;
}
