// The dashboard: plain DOM and canvas, no build step, no network beyond this server.
"use strict";

const api = (path) => fetch(`/api/v1${path}`).then((r) => {
  if (r.status === 401) document.getElementById("auth").hidden = false; // no token: say what to do
  return r.ok ? r.json() : Promise.reject(r.status);
});
// Stream states as a person reads them: green delivers frames, amber is on its way back, red needs a look.
const STATE_CLASS = { running: "ok", ended: "ok", loading: "warn", connecting: "warn", reconnecting: "bad", failed: "bad", stopped: "bad" };
const panels = new Map(); // stream id -> {root, points, dirty, last}
const MAX_POINTS = 200;

function text(el, value) { el.textContent = value; }
function fmt(p) { return p ? `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)}` : "–"; }

function addPanel(stream) {
  const node = document.getElementById("panel-template").content.firstElementChild.cloneNode(true);
  node.dataset.stream = stream.id;
  text(node.querySelector(".title"), stream.id);
  const meta = `${stream.model} on ${stream.backend}${stream.device ? " / " + stream.device : ""}`;
  text(node.querySelector(".meta"), meta);
  node.querySelector("h3").title = `${stream.id}: ${meta}`; // the heading stays one line; the whole of it on hover
  node.querySelector(".video").src = `/api/v1/streams/${encodeURIComponent(stream.id)}/video.mjpg?height=360&fps=10&zones=true`;
  document.getElementById("streams").appendChild(node);
  const panel = { root: node, points: [], dirty: false, last: null };
  panels.set(stream.id, panel);
  const events = new EventSource(`/api/v1/streams/${encodeURIComponent(stream.id)}/events`);
  events.addEventListener("detections", (e) => {
    const event = JSON.parse(e.data);
    panel.points.push([event.timing_ms.end_to_end_ms, event.timing_ms.inference_ms]);
    if (panel.points.length > MAX_POINTS) panel.points.shift();
    panel.last = event;
    panel.dirty = true;
  });
}

// One y-scale for every panel, so compared backends read against the same axis.
function sharedTop() {
  const values = [...panels.values()].flatMap((p) => p.points.map((q) => q[0])).sort((a, b) => a - b);
  if (!values.length) return 1;
  return niceCeiling(values[Math.floor(values.length * 0.95)] * 1.25);
}

function niceCeiling(value) { // 1, 2 or 5 times a power of ten, at or above value
  const power = 10 ** Math.floor(Math.log10(value || 1));
  return [1, 2, 5, 10].map((m) => m * power).find((v) => v >= value);
}

function render() {
  const top = sharedTop();
  for (const panel of panels.values()) {
    if (!panel.dirty && panel.top === top) continue;
    panel.dirty = false;
    panel.top = top;
    drawChart(panel.root.querySelector(".latency-chart"), panel.points, top);
    if (!panel.last) continue;
    const event = panel.last;
    text(panel.root.querySelector(".frame"), `frame ${event.frame}`);
    const list = panel.root.querySelector(".detections");
    list.replaceChildren(...event.detections.map((d) => {
      const li = document.createElement("li");
      const track = d.track_id === null || d.track_id === undefined ? "" : ` #${d.track_id}`;
      li.textContent = `${d.label}${track} ${d.score.toFixed(2)}  [${d.box.map((v) => Math.round(v)).join(", ")}]`;
      return li;
    }));
    if (!event.detections.length) list.replaceChildren(Object.assign(document.createElement("li"), { textContent: "(none)" }));
  }
}

function drawChart(canvas, points, top) {
  // Drawn at the canvas's displayed size, so labels are not scaled down with it.
  const scale = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 480, height = canvas.clientHeight || 140;
  if (canvas.width !== Math.round(width * scale)) { canvas.width = Math.round(width * scale); canvas.height = Math.round(height * scale); }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const left = 64; // room for the axis labels, beside the plot rather than under its lines
  ctx.font = "12px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const y = height - 6 - ((height - 12) * i) / 4;
    ctx.strokeStyle = "#2a323b"; ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(width, y); ctx.stroke();
    ctx.fillStyle = "#c5ccd3";
    ctx.fillText(`${+((top * i) / 4).toPrecision(3)} ms`, left - 4, y);
  }
  for (const [index, colour] of [[1, "#ffb14f"], [0, "#4fb3ff"]]) {
    ctx.strokeStyle = colour; ctx.lineWidth = 1.5; ctx.beginPath();
    points.forEach((p, i) => {
      const x = left + (i / (MAX_POINTS - 1)) * (width - left);
      const y = height - 6 - (Math.min(p[index], top) / top) * (height - 12); // spikes are clipped at the top
      i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
    });
    ctx.stroke();
  }
  canvas.dataset.points = String(Number(canvas.dataset.points) + 1); // redraw count, for tests and curiosity
}

function showState(panel, stream) {
  const badge = panel.root.querySelector(".state");
  badge.className = `badge state ${STATE_CLASS[stream.state] || "warn"}`;
  text(badge, stream.state);
  const error = panel.root.querySelector(".error");
  error.hidden = !stream.error;
  text(error, stream.error || "");
}

async function refreshStats() {
  try {
    const streams = await api("/streams");
    for (const stream of streams) {
      const panel = panels.get(stream.id);
      if (panel) showState(panel, stream);
    }
    const stats = await api("/stats");
    for (const [id, panel] of panels) {
      const s = stats.streams[id];
      if (!s) continue;
      const l = s.latency_ms;
      text(panel.root.querySelector(".figures"),
        `${s.state} · ${s.fps_processed.toFixed(1)} fps (in ${s.fps_in.toFixed(1)}, dropped ${s.fps_dropped.toFixed(1)}) · ` +
        `inference p50/p95 ${fmt(l.inference)} ms · end-to-end ${fmt(l.end_to_end)} ms`);
      showCounts(panel, s);
    }
    showDetectors(stats.detectors || []);
    const health = await (await fetch("/health/ready")).json();
    const badge = document.getElementById("ready");
    badge.className = `badge ${{ ok: "ok", degraded: "bad", down: "bad" }[health.status] || "warn"}`;
    text(badge, health.status);
  } catch (err) { /* the server may be restarting; try again on the next tick */ }
}

function showDetectors(detectors) {
  document.getElementById("detectors").hidden = detectors.length === 0;
  const ms = (value) => (value === null ? "–" : value.toFixed(1));
  document.querySelector("#detectors-table tbody").replaceChildren(...detectors.map((d) => {
    const row = document.createElement("tr");
    for (const value of [d.model, d.backend, d.device, `${d.threads ?? "–"} × ${d.lanes}`, d.streams.join(", "),
      ms(d.inference_ms_p50), ms(d.queue_wait_ms_p50), d.detection_fps.toFixed(1), String(d.frames)]) {
      row.appendChild(Object.assign(document.createElement("td"), { textContent: value }));
    }
    if (d.hung) row.className = "no";
    return row;
  }));
}

function showCounts(panel, figures) {
  const parts = Object.entries(figures.zones || {}).map(([name, z]) =>
    `${name}: ${Object.values(z.objects).reduce((a, b) => a + b, 0)} in zone (longest ${z.longest_dwell_s.toFixed(0)} s)`)
    .concat(Object.entries(figures.lines || {}).map(([name, l]) => `${name}: in ${l.crossed_in} / out ${l.crossed_out}`));
  const counts = panel.root.querySelector(".counts");
  counts.hidden = !parts.length;
  text(counts, parts.join(" · "));
}

function eventCard(event) {
  const card = document.createElement("figure");
  card.className = "event";
  if (event.has_snapshot) {
    const img = Object.assign(document.createElement("img"), { loading: "lazy", alt: `${event.label} ${event.track_id}` });
    img.src = `/api/v1/events/${encodeURIComponent(event.id)}/snapshot.jpg`;
    card.appendChild(img);
  }
  const when = new Date(event.start * 1000).toLocaleTimeString();
  const span = event.end === null ? "going on" : `${(event.end - event.start).toFixed(1)} s`;
  const where = [...event.zones, ...event.lines].join(", ");
  card.appendChild(Object.assign(document.createElement("figcaption"), {
    textContent: `${event.label} #${event.track_id} · ${event.stream} · ${when} · ${span} · best ${event.best_score.toFixed(2)}${where ? " · " + where : ""}`,
  }));
  return card;
}

async function showEvents() {
  const page = await api("/events?limit=12");
  document.getElementById("events").hidden = false;
  document.getElementById("event-list").replaceChildren(...page.events.map(eventCard));
  text(document.getElementById("events-note"), page.events.length ? "" : "(none yet)");
}

async function followEvents() {
  try { await showEvents(); } catch (status) { return; } // 404: this service keeps no events
  let pending = false;
  new EventSource("/api/v1/events/stream").addEventListener("event", () => {
    if (pending) return; // a burst of changes: one refresh
    pending = true;
    setTimeout(() => { pending = false; showEvents().catch(() => {}); }, 500);
  });
}

function showCompare(groups) {
  const body = document.querySelector("#compare-table tbody");
  body.replaceChildren(...groups.flatMap((g) => g.backends.map((b) => {
    const row = document.createElement("tr");
    const a = b.agreement;
    const agreement = a.map50 === null ? "–" : (a.reference === b.stream ? "reference" : `${a.map50.toFixed(3)} (${a.frames} frames)`);
    for (const value of [b.stream, b.backend, b.device || "", b.fps_processed.toFixed(1), b.fps_dropped.toFixed(1),
      fmt(b.latency_ms.inference), fmt(b.latency_ms.end_to_end), agreement]) {
      row.appendChild(Object.assign(document.createElement("td"), { textContent: value }));
    }
    return row;
  })));
}

async function showBackends() {
  const body = document.querySelector("#backends-table tbody");
  const rows = await api("/backends");
  body.replaceChildren(...rows.map((b) => {
    const row = document.createElement("tr");
    const cells = [b.key, b.available ? "yes" : "no", b.engine || "", b.devices.join("\n") || "–",
      b.models.join(", "), b.available ? "" : (b.problem || b.install)];
    cells.forEach((value, i) => {
      const td = Object.assign(document.createElement("td"), { textContent: value });
      if (i === 1) td.className = b.available ? "yes" : "no";
      row.appendChild(td);
    });
    return row;
  }));
}

async function start() {
  const streams = await api("/streams");
  streams.forEach(addPanel);
  streams.forEach((s) => showState(panels.get(s.id), s));
  const groups = await api("/compare");
  if (groups.length) {
    document.getElementById("compare").hidden = false;
    showCompare(groups);
    new EventSource("/api/v1/compare/events").addEventListener("compare", (e) => showCompare(JSON.parse(e.data)));
  }
  showBackends();
  followEvents();
  refreshStats();
  setInterval(refreshStats, 2000);
  setInterval(render, 250); // at most 4 redraws a second, however fast the stream
}

start();
