// podnet ui: the flow table and the map over /api/flows (NDJSON, the
// agents' own format). A filter change starts over: one follow=true
// stream gives the records the agents hold, then the new ones.
"use strict";

const FILTERS = ["namespace", "pod", "verdict", "protocol", "port"];
const VERDICTS = ["forwarded", "dropped-policy", "dropped-guard"];
const MAX_ROWS = 1000;
const LIST_LIMIT = 500;
const MAX_OUTSIDE = 16; // outside addresses drawn one by one; the rest share a node
const SVGNS = "http://www.w3.org/2000/svg";

const $ = (sel) => document.querySelector(sel);
const form = $("#filters");
const tbody = $("#flows tbody");

let run = null; // the current list-then-follow: {abort, seen}
let model = newModel();
let renderPending = false;

// ---- fetching ----

function filterQuery() {
  const q = new URLSearchParams();
  for (const name of FILTERS) {
    const v = form.elements[name].value.trim();
    if (v) q.set(name, v);
  }
  return q;
}

function setStatus(state, text) {
  const s = $("#status");
  s.dataset.state = state;
  s.querySelector("span").textContent = text;
}

// start (re)opens the one stream of the page: with follow=true the
// agents send the newest LIST_LIMIT records they hold, then each new one.
async function start() {
  if (run) run.abort.abort();
  const q = filterQuery();
  history.replaceState(null, "", q.toString() ? "?" + q : location.pathname);
  const abort = new AbortController();
  run = { abort, seen: new Set(), opened: 0 };
  const mine = run;
  tbody.replaceChildren();
  $("#count").textContent = 0;
  model = newModel();
  scheduleRender();
  setStatus("connecting", "connecting…");
  let retry = true;
  try {
    q.set("limit", LIST_LIMIT);
    q.set("follow", "true");
    const resp = await fetch("/api/flows?" + q, { signal: abort.signal });
    if (!resp.ok) throw new Error((await resp.text()).trim() || resp.statusText);
    mine.opened = Date.now();
    setStatus("live", "live · " + sourceLabel);
    await readLines(resp, (rec) => add(mine, rec));
    throw new Error("the flow stream ended");
  } catch (err) {
    if (abort.signal.aborted) return;
    retry = err.status !== 400; // a refused filter waits for the user
    setStatus("error", err.message + (retry ? " · retrying in 5 s" : ""));
    if (retry) setTimeout(() => { if (run === mine) start(); }, 5000);
  }
}

// readLines calls fn with each NDJSON record of resp's body; a line
// {"error": ...} is the server saying the stream failed.
async function readLines(resp, fn) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line) continue;
      const obj = JSON.parse(line);
      if (obj.error !== undefined) throw Object.assign(new Error(obj.error), { status: obj.status });
      fn(obj);
    }
  }
}

// add shows one record once (an agent's seq is unique per node), its
// row placed by time: several agents' records interleave. A record that
// comes after the first second, past the agents' snapshot, is
// highlighted.
function add(r, rec) {
  if (run !== r) return;
  const key = rec.node + "/" + rec.seq;
  if (r.seen.has(key)) return;
  r.seen.add(key);
  const tr = row(rec, Date.now() - r.opened > 1000);
  let next = tbody.firstElementChild;
  while (next && Number(next.dataset.t) > Number(tr.dataset.t)) next = next.nextElementSibling;
  tbody.insertBefore(tr, next);
  while (tbody.rows.length > MAX_ROWS) tbody.lastElementChild.remove();
  $("#count").textContent = tbody.rows.length;
  addToModel(rec);
  scheduleRender();
}

// ---- the table ----

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function hostPort(ep) {
  const ip = ep.ip.includes(":") ? "[" + ep.ip + "]" : ep.ip;
  return ep.port ? ip + ":" + ep.port : ep.ip;
}

function endpointCell(ep) {
  const td = el("td", "ep");
  if (ep.pod) {
    td.append(el("b", "", ep.namespace + "/" + ep.pod), el("small", "", hostPort(ep)));
  } else {
    td.append(el("span", "", hostPort(ep)));
  }
  return td;
}

function ruleText(r) {
  const idx = r.index < 0 ? "isolates" : r.direction + "[" + r.index + "]";
  const name = r.kind === "NetworkPolicy"
    ? "NetworkPolicy " + r.namespace + "/" + r.name
    : (r.tier ? r.tier + " " : "") + "ClusterNetworkPolicy " + r.name;
  return name + " · " + (r.index < 0 ? r.direction + " " : "") + idx + " · " + r.action;
}

function human(n) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function row(rec, live) {
  const tr = el("tr", live ? "new" : "");
  tr.dataset.verdict = rec.verdict;
  tr.dataset.seq = rec.seq;
  const t = new Date(rec.time);
  tr.dataset.t = isNaN(t) ? 0 : t.getTime();
  const time = el("td", "time", (isNaN(t) ? String(rec.time) : t.toISOString().slice(11, 23)) + " ");
  time.append(el("small", "", rec.event));
  const verdict = el("td", "verdict-cell");
  verdict.append(el("span", "verdict " + rec.verdict, rec.verdict));
  const rules = el("td", "rules");
  if (rec.rules && rec.rules.length) {
    for (const r of rec.rules) rules.append(el("div", "", ruleText(r)));
  } else {
    rules.append(el("small", "", "no policy"));
  }
  let counts = "–";
  if (rec.packets) counts = rec.packets + " pkt" + (rec.packets === 1 ? "" : "s");
  if (rec.bytes) counts += " / " + human(rec.bytes);
  tr.append(time, el("td", "node", rec.node), verdict, el("td", "proto", rec.protocol),
    endpointCell(rec.src), endpointCell(rec.dst), rules, el("td", "counts", counts));
  return tr;
}

// ---- the map model ----

function newModel() {
  return { nodes: new Map(), edges: new Map(), outside: 0, verdicts: {} };
}

// nodeOf names an endpoint's node on the map: its pod, or the outside
// address (a shared node past MAX_OUTSIDE of them).
function nodeOf(ep) {
  if (ep.pod) {
    const id = "pod:" + ep.namespace + "/" + ep.pod;
    if (!model.nodes.has(id)) model.nodes.set(id, { id, group: ep.namespace, label: ep.pod });
    return id;
  }
  let id = "ip:" + ep.ip;
  if (!model.nodes.has(id)) {
    if (model.outside >= MAX_OUTSIDE) {
      id = "ip:other";
      if (!model.nodes.has(id)) model.nodes.set(id, { id, group: "", label: "other addresses", outside: true });
      return id;
    }
    model.outside++;
    model.nodes.set(id, { id, group: "", label: ep.ip, outside: true });
  }
  return id;
}

function addToModel(rec) {
  const src = nodeOf(rec.src), dst = nodeOf(rec.dst);
  const key = src + "|" + dst + "|" + rec.verdict;
  let e = model.edges.get(key);
  if (!e) {
    e = { src, dst, verdict: rec.verdict, count: 0 };
    model.edges.set(key, e);
  }
  if (rec.event !== "end" || e.count === 0) {
    e.count++;
    model.verdicts[rec.verdict] = (model.verdicts[rec.verdict] || 0) + 1;
  }
}

function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  setTimeout(() => { renderPending = false; render(); }, 60);
}

// ---- the map drawing ----

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const PAD = 16, HEAD = 32, GAP = 26, LABEL = 26, SPACING = 96;

// layout places the groups (namespaces sorted, outside last) on shelves
// as wide as the map; a group's nodes sit on a ring, so that an edge
// between two of them is a chord, not a line over a third.
function layout(width) {
  const groups = new Map();
  for (const n of model.nodes.values()) {
    if (!groups.has(n.group)) groups.set(n.group, []);
    groups.get(n.group).push(n);
  }
  const names = [...groups.keys()].sort((a, b) => (a === "") - (b === "") || a.localeCompare(b));
  const boxes = names.map((name) => {
    const nodes = groups.get(name).sort((a, b) => a.label.localeCompare(b.label));
    const r = nodes.length < 2 ? 0 : Math.max(40, (nodes.length * SPACING) / (2 * Math.PI));
    return { name, nodes, r, w: Math.max(2 * r + SPACING + 2 * PAD, 190), h: 2 * r + HEAD + LABEL + 2 * PAD };
  });
  const shelves = [];
  let shelf = null;
  for (const b of boxes) {
    if (!shelf || shelf.w + GAP + b.w > width - 2 * GAP) {
      shelf = { boxes: [], w: -GAP, h: 0 };
      shelves.push(shelf);
    }
    shelf.boxes.push(b);
    shelf.w += GAP + b.w;
    shelf.h = Math.max(shelf.h, b.h);
  }
  let y = GAP / 2, contentW = 0;
  for (const s of shelves) {
    let x = Math.max(GAP, (width - s.w) / 2);
    for (const b of s.boxes) {
      b.x = x; b.y = y; b.h = s.h;
      const cx = x + b.w / 2, cy = y + HEAD + (s.h - HEAD - LABEL) / 2;
      b.nodes.forEach((n, i) => {
        const a = -Math.PI / 2 + (2 * Math.PI * i) / b.nodes.length;
        n.x = cx + b.r * Math.cos(a);
        n.y = cy + b.r * Math.sin(a);
        n.above = b.nodes.length > 2 && Math.sin(a) < -0.5; // its label clear of the ring's chords
      });
      x += b.w + GAP;
    }
    contentW = Math.max(contentW, x);
    y += s.h + GAP;
  }
  return { boxes, w: contentW, h: y };
}

function render() {
  const map = $("#map");
  const W = map.clientWidth || 1200, H = map.clientHeight || 360;
  for (const v of VERDICTS) {
    document.querySelector('#legend em[data-verdict="' + v + '"]').textContent = model.verdicts[v] || 0;
  }
  map.replaceChildren(defs());
  if (model.nodes.size === 0) {
    map.setAttribute("viewBox", "0 0 " + W + " " + H);
    map.append(svg("text", { x: W / 2, y: H / 2, class: "empty" }, "no flows yet"));
    return;
  }
  const lay = layout(W);
  map.setAttribute("viewBox", viewBox(lay.boxes, W, H));
  const groups = svg("g", { class: "groups" });
  for (const b of lay.boxes) {
    const g = svg("g", { class: "group" + (b.name ? "" : " outside"), "data-name": b.name || "outside" });
    g.append(svg("rect", { x: b.x, y: b.y, width: b.w, height: b.h }),
      svg("text", { x: b.x + 10, y: b.y + 16 }, b.name ? "namespace " + b.name : "outside the pod network"));
    groups.append(g);
  }
  map.append(groups, drawEdges(), drawNodes());
}

// viewBox frames the groups: a small map is drawn larger (up to
// MAX_ZOOM), a large one smaller, centred either way (the SVG's default
// preserveAspectRatio).
function viewBox(boxes, W, H) {
  const MAX_ZOOM = 1.35, M = 12;
  const x0 = Math.min(...boxes.map((b) => b.x)) - M, y0 = Math.min(...boxes.map((b) => b.y)) - M;
  const x1 = Math.max(...boxes.map((b) => b.x + b.w)) + M, y1 = Math.max(...boxes.map((b) => b.y + b.h)) + M;
  const zoom = Math.max(Math.min(W / (x1 - x0), H / (y1 - y0), MAX_ZOOM), 0.1);
  const w = W / zoom, h = H / zoom;
  return [(x0 + x1 - w) / 2, (y0 + y1 - h) / 2, w, h].join(" ");
}

function defs() {
  const d = svg("defs");
  for (const v of VERDICTS) {
    const m = svg("marker", { id: "arrow-" + v, viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    const p = svg("path", { d: "M0,0 L10,5 L0,10 z" });
    p.style.fill = "var(--" + v + ")";
    m.append(p);
    d.append(m);
  }
  return d;
}

// drawEdges draws each (source, destination, verdict) as a curve bent to
// its right, so that both directions and each verdict of a pair show.
function drawEdges() {
  const g = svg("g", { class: "edges" });
  for (const e of model.edges.values()) {
    const a = model.nodes.get(e.src), b = model.nodes.get(e.dst);
    if (a === b) continue;
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
    const bend = 14 + 12 * VERDICTS.indexOf(e.verdict);
    const cx = (a.x + b.x) / 2 + (-dy / len) * bend, cy = (a.y + b.y) / 2 + (dx / len) * bend;
    const ex = b.x - (b.x - cx) / Math.hypot(b.x - cx, b.y - cy) * 13;
    const ey = b.y - (b.y - cy) / Math.hypot(b.x - cx, b.y - cy) * 13;
    const path = svg("path", {
      d: `M${a.x},${a.y} Q${cx},${cy} ${ex},${ey}`,
      class: "edge " + e.verdict, "marker-end": "url(#arrow-" + e.verdict + ")",
      "data-src": e.src.replace(/^(pod|ip):/, ""), "data-dst": e.dst.replace(/^(pod|ip):/, ""),
      "data-verdict": e.verdict, "data-count": e.count,
    });
    path.style.strokeWidth = Math.min(6, 1.5 + Math.log2(e.count)) + "px";
    path.append(svg("title", {}, `${a.label} → ${b.label}: ${e.verdict}, ${e.count} flow${e.count === 1 ? "" : "s"}`));
    g.append(path);
  }
  return g;
}

function drawNodes() {
  const g = svg("g", { class: "nodes" });
  for (const n of model.nodes.values()) {
    const node = svg("g", { class: "node" + (n.outside ? " outside" : ""), "data-id": n.id.replace(/^(pod|ip):/, "") });
    node.append(n.outside
      ? svg("rect", { x: n.x - 8, y: n.y - 8, width: 16, height: 16, rx: 3 })
      : svg("circle", { cx: n.x, cy: n.y, r: 9 }));
    const label = n.label.length > 17 ? n.label.slice(0, 16) + "…" : n.label;
    node.append(svg("text", { x: n.x, y: n.above ? n.y - 15 : n.y + 24 }, label), svg("title", {}, n.id.replace(/^(pod|ip):/, "")));
    g.append(node);
  }
  return g;
}

// ---- start ----

let sourceLabel = "";

form.addEventListener("submit", (ev) => { ev.preventDefault(); start(); });
form.addEventListener("reset", () => setTimeout(start, 0));
window.addEventListener("resize", scheduleRender);

(async () => {
  const params = new URLSearchParams(location.search);
  for (const name of FILTERS) if (params.has(name)) form.elements[name].value = params.get(name);
  try {
    sourceLabel = (await (await fetch("/api/info")).json()).source;
  } catch (err) {
    sourceLabel = "";
  }
  start();
})();
