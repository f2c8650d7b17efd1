// The dashboard: plain DOM and canvas, no build step, no network beyond this server.
// A grid of every camera fed by one live channel (/api/v1/live), and one camera in focus at full rate (its MJPEG):
// two long-lived connections whatever the number of cameras, under the browser's six per host.
// Every address is relative to the page, so it works behind a reverse proxy at a sub-path (https://home/edge/).
"use strict";

const api = (path) => fetch(`api/v1${path}`).then((r) => {
  if (r.status === 401) document.getElementById("auth").hidden = false; // no token: say what to do
  return r.ok ? r.json() : Promise.reject(r.status);
});
// Stream states as a person reads them: green delivers frames, amber is on its way back, red needs a look.
const STATE_CLASS = { running: "ok", ended: "ok", loading: "warn", connecting: "warn", reconnecting: "bad", failed: "bad", stopped: "bad" };
const MAX_POINTS = 200;
const streams = new Map(); // stream id -> {id, tile, meta, points, last, stream (summary), figures, dirty}
const focus = { id: null, root: document.getElementById("focus"), video: null, top: null };
let live = null;

function text(el, value) { el.textContent = value; }
function fmt(p) { return p ? `${p.p50.toFixed(1)} / ${p.p95.toFixed(1)}` : "–"; }
function el(tag, props) { return Object.assign(document.createElement(tag), props); }

function addTile(summary) {
  const tile = document.getElementById("tile-template").content.firstElementChild.cloneNode(true);
  tile.dataset.stream = summary.id;
  const meta = `${summary.model} on ${summary.backend}${summary.device ? " / " + summary.device : ""}`;
  text(tile.querySelector(".title"), summary.id);
  text(tile.querySelector(".meta"), meta);
  tile.querySelector("h3").title = `${summary.id}: ${meta}`; // the heading stays one line; the whole of it on hover
  tile.querySelector(".thumb").alt = `${summary.id}, newest frame`;
  const open = () => { location.hash = `#/stream/${encodeURIComponent(summary.id)}`; };
  tile.addEventListener("click", open);
  tile.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
  document.getElementById("grid").appendChild(tile);
  streams.set(summary.id, { id: summary.id, tile, meta, points: [], last: null, summary, figures: null, dirty: false });
}

// -- the live channel ----------------------------------------------------------------------------------------------
let liveLost = false;
function connectLive() {
  const badge = document.getElementById("connection");
  live = new EventSource("api/v1/live?thumb_fps=2&thumb_height=240");
  live.onopen = () => {
    badge.className = "badge ok";
    text(badge, "live");
    if (liveLost && eventsShown) scheduleEventsRefresh(); // events that started or ended while it was away
    liveLost = false;
  };
  live.onerror = () => {
    liveLost = true;
    badge.className = "badge bad";
    text(badge, "connection lost: reconnecting…");
    if (live.readyState === EventSource.CLOSED) setTimeout(connectLive, 2000); // the browser gave up: try again
  };
  live.addEventListener("detections", (e) => {
    const event = JSON.parse(e.data);
    const s = streams.get(event.stream);
    if (!s) return;
    s.points.push([event.timing_ms.end_to_end_ms, event.timing_ms.inference_ms]);
    if (s.points.length > MAX_POINTS) s.points.shift();
    s.last = event;
    s.dirty = true;
  });
  live.addEventListener("thumb", (e) => {
    const thumb = JSON.parse(e.data);
    const s = streams.get(thumb.stream);
    if (s) s.tile.querySelector(".thumb").src = `data:image/jpeg;base64,${thumb.jpeg}`;
  });
  live.addEventListener("compare", (e) => showCompare(JSON.parse(e.data)));
  live.addEventListener("change", () => scheduleEventsRefresh());
}

// -- the camera in focus -------------------------------------------------------------------------------------------
function routeFromHash() {
  const match = location.hash.match(/^#\/stream\/(.+)$/);
  const id = match ? decodeURIComponent(match[1]) : null;
  setFocus(id && streams.has(id) ? id : (streams.size === 1 && !location.hash ? [...streams.keys()][0] : null));
}

function setFocus(id) {
  if (focus.id === id) return;
  focus.id = id;
  const root = focus.root;
  const video = root.querySelector(".video");
  video.removeAttribute("src"); // closes the previous camera's MJPEG: one full-rate video at a time
  root.hidden = id === null;
  for (const s of streams.values()) s.tile.classList.toggle("focused", s.id === id);
  if (id === null) {
    delete root.dataset.stream;
    if (eventsShown) showEvents().catch(() => {});
    return;
  }
  const s = streams.get(id);
  root.dataset.stream = id;
  text(root.querySelector(".title"), id);
  text(root.querySelector(".meta"), s.meta);
  // hidden until a picture comes: a camera that is off showed a broken-image icon under its error box
  video.hidden = true;
  video.onload = () => { video.hidden = false; };
  video.onerror = () => {
    video.hidden = true;
    setTimeout(() => { if (focus.id === id) video.src = mjpegUrl(id); }, 2000); // dropped: again
  };
  video.src = mjpegUrl(id);
  s.dirty = true;
  if (eventsShown) showEvents().catch(() => {});
  showState(root, s.summary);
  if (s.figures) showFigures(root, s.figures);
}

// The tiles or motion regions each frame ran as, drawn on request (as Frigate's debug view draws its regions).
function mjpegUrl(id) {
  const box = document.getElementById("show-regions");
  const regions = box && box.checked ? "&regions=true" : "";
  return `api/v1/streams/${encodeURIComponent(id)}/video.mjpg?height=720&zones=true${regions}`;
}
const showRegions = document.getElementById("show-regions");
if (showRegions) {
  showRegions.addEventListener("change", () => {
    if (focus.id !== null) focus.root.querySelector(".video").src = mjpegUrl(focus.id);
  });
}

// One y-scale for the focus chart and its neighbours' data, so compared backends read against the same axis.
function sharedTop() {
  const values = [...streams.values()].flatMap((s) => s.points.map((q) => q[0])).sort((a, b) => a - b);
  if (!values.length) return 1;
  return niceCeiling(values[Math.floor(values.length * 0.95)] * 1.2);
}

function niceCeiling(value) { // a round number at or above value, never more than a third above it
  const power = 10 ** Math.floor(Math.log10(value || 1));
  return [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map((m) => m * power).find((v) => v >= value);
}

function render() {
  const top = focus.id === null ? null : sharedTop(); // only the chart in focus needs a scale
  for (const s of streams.values()) {
    const inFocus = s.id === focus.id;
    if (!s.dirty && !(inFocus && focus.top !== top)) continue;
    s.dirty = false;
    if (!s.last) continue;
    const event = s.last;
    text(s.tile.querySelector(".frame"), `frame ${event.frame}`);
    text(s.tile.querySelector(".detections"), summarise(event.detections));
    if (!inFocus) continue;
    focus.top = top;
    drawChart(focus.root.querySelector(".latency-chart"), s.points, top);
    text(focus.root.querySelector(".frame"), `frame ${event.frame}`);
    const list = focus.root.querySelector(".detections");
    list.replaceChildren(...event.detections.map((d) => {
      const track = d.track_id === null || d.track_id === undefined ? "" : ` #${d.track_id}`;
      return el("li", { textContent: `${d.label}${track} ${d.score.toFixed(2)}  [${d.box.map((v) => Math.round(v)).join(", ")}]` });
    }));
    if (!event.detections.length) list.replaceChildren(el("li", { textContent: "(none)" }));
  }
}

function summarise(detections) { // "person ×3, car" for a tile
  if (!detections.length) return "nothing detected";
  const counts = new Map();
  for (const d of detections) counts.set(d.label, (counts.get(d.label) || 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1]).map(([label, n]) => (n > 1 ? `${label} ×${n}` : label)).join(", ");
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
  canvas.dataset.top = String(top);
}

// -- figures, states, tables (short requests, every 2 s) ------------------------------------------------------------
function showState(root, summary) {
  const badge = root.querySelector(".state");
  badge.className = `badge state ${STATE_CLASS[summary.state] || "warn"}`;
  text(badge, summary.state);
  const error = root.querySelector(".error");
  error.hidden = !summary.error;
  text(error, summary.error || "");
}

function showFigures(root, s) {
  const l = s.latency_ms;
  text(root.querySelector(".figures"),
    `${s.fps_processed.toFixed(1)} fps (in ${s.fps_in.toFixed(1)}, dropped ${s.fps_dropped.toFixed(1)}) · ` +
    `inference p50/p95 ${fmt(l.inference)} ms · end-to-end ${fmt(l.end_to_end)} ms`);
  const parts = Object.entries(s.zones || {}).map(([name, z]) =>
    `${name}: ${Object.values(z.objects).reduce((a, b) => a + b, 0)} in zone (longest ${z.longest_dwell_s.toFixed(0)} s)`)
    .concat(Object.entries(s.lines || {}).map(([name, line]) => `${name}: in ${line.crossed_in} / out ${line.crossed_out}`));
  const counts = root.querySelector(".counts");
  counts.hidden = !parts.length;
  text(counts, parts.join(" · "));
}

async function refreshStats() {
  try {
    const [summaries, stats] = await Promise.all([api("/streams"), api("/stats")]);
    for (const summary of summaries) {
      const s = streams.get(summary.id);
      if (!s) continue;
      s.summary = summary;
      showState(s.tile, summary);
      if (s.id === focus.id) showState(focus.root, summary);
    }
    for (const [id, figures] of Object.entries(stats.streams)) {
      const s = streams.get(id);
      if (!s) continue;
      s.figures = figures;
      showFigures(s.tile, figures);
      if (id === focus.id) showFigures(focus.root, figures);
    }
    showDetectors(stats.detectors || []);
    const health = await (await fetch("health/ready")).json();
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
      row.appendChild(el("td", { textContent: value }));
    }
    if (d.hung) row.className = "no";
    return row;
  }));
}

function eventCard(event) {
  const card = el("figure", { className: "event" });
  if (event.has_snapshot) {
    const img = el("img", { loading: "lazy", alt: `${event.label} ${event.track_id}` });
    img.src = `api/v1/events/${encodeURIComponent(event.id)}/snapshot.jpg`;
    card.appendChild(img);
  }
  const when = new Date(event.start * 1000).toLocaleTimeString();
  const span = event.end === null ? "going on" : `${(event.end - event.start).toFixed(1)} s`;
  const where = [...event.zones, ...event.lines].join(", ");
  card.appendChild(el("figcaption", {
    textContent: `${event.label} #${event.track_id} · ${event.stream} · ${when} · ${span} · best ${event.best_score.toFixed(2)}${where ? " · " + where : ""}`,
  }));
  return card;
}

async function showEvents() { // the camera in focus: its own events; the grid: everyone's
  const id = focus.id;
  const page = await api(`/events?limit=12${id === null ? "" : "&stream=" + encodeURIComponent(id)}`);
  if (id !== focus.id) return; // the focus moved while this was on its way
  document.getElementById("event-list").replaceChildren(...page.events.map(eventCard));
  const scope = id === null ? "" : `of ${id} `;
  text(document.getElementById("events-note"), page.events.length ? scope : `${scope}(none yet)`);
}

let eventsPending = false;
let eventsShown = false; // events are kept by this service (from /api/v1/setup)
function scheduleEventsRefresh() { // a burst of changes: one refresh
  if (eventsPending) return;
  eventsPending = true;
  setTimeout(() => { eventsPending = false; showEvents().catch(() => {}); }, 500);
}

function showCompare(groups) {
  document.getElementById("compare").hidden = groups.length === 0;
  const body = document.querySelector("#compare-table tbody");
  body.replaceChildren(...groups.flatMap((g) => g.backends.map((b) => {
    const row = document.createElement("tr");
    const a = b.agreement;
    const agreement = a.reference === b.stream ? "reference"
      : a.map50 === null ? `– (${a.frames} of ${a.needs} frames)` : `${a.map50.toFixed(3)} (${a.frames} frames)`;
    for (const value of [b.stream, b.backend, b.device || "", b.fps_processed.toFixed(1), b.fps_dropped.toFixed(1),
      fmt(b.latency_ms.inference), fmt(b.latency_ms.end_to_end), agreement]) {
      row.appendChild(el("td", { textContent: value }));
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
      const td = el("td", { textContent: value });
      if (i === 1) td.className = b.available ? "yes" : "no";
      row.appendChild(td);
    });
    return row;
  }));
}

async function start() {
  const [setup, summaries] = await Promise.all([api("/setup"), api("/streams")]); // what exists: nothing probed
  summaries.forEach(addTile);
  summaries.forEach((s) => showState(streams.get(s.id).tile, s));
  document.body.dataset.cameras = String(summaries.length);
  connectLive();
  window.addEventListener("hashchange", routeFromHash);
  routeFromHash();
  if (setup.events) {
    eventsShown = true;
    document.getElementById("events").hidden = false;
    showEvents().catch(() => {});
  }
  if (setup.compare_groups.length) api("/compare").then(showCompare).catch(() => {});
  showBackends().catch(() => {});
  refreshStats();
  setInterval(refreshStats, 2000);
  setInterval(render, 250); // at most 4 redraws a second, however fast the streams
}

start().catch((status) => { if (status !== 401) console.error("dashboard: cannot start", status); });
