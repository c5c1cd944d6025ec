// The status page's HTML: it polls /status.json twice a second and draws
// the members, the curves (inline SVG) and the event timeline. Element ids
// (member-ROLE-RANK, curve-accuracy with data-points) are what
// tests/system/status_page_test.sh reads.
#include "actors/scheduler/status_page.hpp"

namespace troupe {

const std::string& status_page::html() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>troupe status</title>
<style>
body { font: 14px sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: left; }
tr.live td.health { color: #080; } svg { background: #fafafa; border: 1px solid #ccc; }
#events { max-height: 18em; overflow-y: auto; font: 12px monospace; }
.bad { color: #b00; }
</style></head><body>
<h1>troupe <span id="view">(no view yet)</span></h1>
<h2>Members</h2>
<table><thead><tr><th>role</th><th>rank</th><th>host</th><th>pid</th>
<th>health</th><th>last event</th></tr></thead><tbody id="members"></tbody></table>
<h2>Training (rank 0)</h2>
<div>test accuracy <span id="accuracy-now">-</span>, train loss
<span id="loss-now">-</span>, epoch <span id="epoch-now">-</span></div>
<svg id="curve-accuracy" width="480" height="200" data-points="0"></svg>
<svg id="curve-loss" width="480" height="200" data-points="0"></svg>
<h2>Events</h2><ol id="events"></ol>
<script>
const bad = new Set(["crashed", "gave-up", "agent-down", "exited", "lost", "unreplicated", "stuck", "ended"]);
function text(s) { return String(s).replace(/[&<>]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;"})[c]); }
function curve(id, points, key, label) {
  const svg = document.getElementById(id);
  const xs = points.filter(p => typeof p[key] === "number" && typeof p.epoch === "number");
  svg.setAttribute("data-points", xs.length);
  if (xs.length === 0) { svg.innerHTML = ""; return; }
  const w = 480, h = 200, pad = 30;
  const x1 = Math.max(...xs.map(p => p.epoch), 1e-9);
  const lo = Math.min(...xs.map(p => p[key])), hi = Math.max(...xs.map(p => p[key]));
  const span = hi - lo || 1;
  const pts = xs.map(p => [pad + (w - 2 * pad) * p.epoch / x1,
                           h - pad - (h - 2 * pad) * (p[key] - lo) / span]);
  svg.innerHTML = '<polyline fill="none" stroke="#06c" stroke-width="2" points="' +
    pts.map(q => q[0].toFixed(1) + "," + q[1].toFixed(1)).join(" ") + '"/>' +
    '<text x="' + pad + '" y="16">' + label + " " + lo.toFixed(4) + " .. " + hi.toFixed(4) +
    "</text>";
}
async function refresh() {
  try {
    const s = await (await fetch("/status.json", {cache: "no-store"})).json();
    const gone = (what, ranks) => ranks && ranks.length ?
      "; " + what + ": worker" + (ranks.length > 1 ? "s " : " ") + ranks.join(", ") : "";
    document.getElementById("view").textContent =
      "view " + s.epoch + ": " + s.members.length + " members" +
      gone("given up", s.given_up) + gone("ended", s.ended) +
      gone("finished", s.finished);
    document.getElementById("members").innerHTML = s.members.map(m =>
      '<tr id="member-' + m.role + "-" + m.rank + '" class="' + m.health + '"><td>' +
      m.role + "</td><td>" + m.rank + "</td><td>" + text(m.host) + "</td><td>" + m.pid +
      '</td><td class="health">' + m.health + "</td><td>" + text(m.last_event || "") +
      "</td></tr>").join("");
    curve("curve-accuracy", s.progress, "accuracy", "test accuracy");
    curve("curve-loss", s.progress, "loss", "train loss");
    const last = s.progress[s.progress.length - 1];
    if (last) {
      document.getElementById("accuracy-now").textContent = last.accuracy;
      document.getElementById("loss-now").textContent = last.loss;
      document.getElementById("epoch-now").textContent = last.epoch;
    }
    document.getElementById("events").innerHTML = s.events.slice(-60).reverse().map(e =>
      '<li class="' + (bad.has(e.kind) ? "bad" : "") + '">' +
      new Date(e.at_ms).toISOString().slice(11, 23) + " " + text(e.kind) + " " +
      text(e.role) + " " + e.rank + ": " + text(e.detail) + "</li>").join("");
  } catch (err) {
    document.getElementById("view").textContent = "(scheduler not answering)";
  }
}
refresh();
setInterval(refresh, 500);
</script></body></html>
)HTML";
  return page;
}

} // namespace troupe
