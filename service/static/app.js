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
  text(node.querySelector(".meta"), `${stream.model} on ${stream.backend}${stream.device ? " / " + stream.device : ""}`);
  node.querySelector(".video").src = `/api/v1/streams/${encodeURIComponent(stream.id)}/video.mjpg?height=360&fps=10`;
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

function render() {
  for (const panel of panels.values()) {
    if (!panel.dirty) continue;
    panel.dirty = false;
    drawChart(panel.root.querySelector(".latency-chart"), panel.points);
    const event = panel.last;
    text(panel.root.querySelector(".frame"), `frame ${event.frame}`);
    const list = panel.root.querySelector(".detections");
    list.replaceChildren(...event.detections.map((d) => {
      const li = document.createElement("li");
      li.textContent = `${d.label} ${d.score.toFixed(2)}  [${d.box.map((v) => Math.round(v)).join(", ")}]`;
      return li;
    }));
    if (!event.detections.length) list.replaceChildren(Object.assign(document.createElement("li"), { textContent: "(none)" }));
  }
}

function drawChart(canvas, points) {
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  if (!points.length) return;
  const top = Math.max(...points.map((p) => p[0])) * 1.15 || 1;
  ctx.strokeStyle = "#2a323b"; ctx.fillStyle = "#8a949e"; ctx.font = "11px sans-serif";
  for (let i = 1; i <= 3; i++) {
    const y = height - (height * i) / 4;
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(width, y); ctx.stroke();
    ctx.fillText(((top * i) / 4).toFixed(1), 4, y - 2);
  }
  for (const [index, colour] of [[1, "#ffb14f"], [0, "#4fb3ff"]]) {
    ctx.strokeStyle = colour; ctx.lineWidth = 1.5; ctx.beginPath();
    points.forEach((p, i) => {
      const x = (i / (MAX_POINTS - 1)) * width, y = height - (p[index] / top) * height;
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
    }
    const health = await (await fetch("/health/ready")).json();
    const badge = document.getElementById("ready");
    badge.className = `badge ${{ ok: "ok", degraded: "bad", down: "bad" }[health.status] || "warn"}`;
    text(badge, health.status);
  } catch (err) { /* the server may be restarting; try again on the next tick */ }
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
  refreshStats();
  setInterval(refreshStats, 2000);
  setInterval(render, 250); // at most 4 redraws a second, however fast the stream
}

start();
