// spothop dashboard: reads the JSON endpoints, listens to /api/stream (server-sent events),
// draws with plotly.js (served by the dashboard itself). Data goes into the page as text only.
"use strict";

const $ = (sel) => document.querySelector(sel);
const PROVIDER_COLOURS = ["#2f6fdf", "#1f8a4c", "#d68910", "#8e44ad", "#16a085", "#c0392b"];
let selectedJob = null;
let refreshing = false;
let pending = false;

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "—" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function money(x) { return x === null || x === undefined ? "—" : x.toFixed(4); }
function when(t) { return new Date(t * 1000).toLocaleTimeString(); }

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function renderJobs(jobs) {
  const body = $("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const tr = document.createElement("tr");
    tr.dataset.job = j.job_id;
    tr.className = "job";
    cell(tr, j.job_id);
    cell(tr, j.name);
    cell(tr, j.state, "state state-" + j.state);
    const p = cell(tr, "");
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = Math.round(100 * j.progress.fraction) + "%";
    bar.appendChild(fill);
    p.appendChild(bar);
    p.appendChild(document.createTextNode(` ${j.progress.done}/${j.progress.total} ${j.progress.unit}`));
    cell(tr, j.instances.map((i) => `${i.provider}/${i.zone} ${i.instance_type} (${i.market}, ${i.state})`).join("; ") || "—");
    cell(tr, j.attempts, "num");
    cell(tr, j.preemptions, "num preemptions");
    cell(tr, money(j.cost_usd), "num");
    tr.addEventListener("click", () => { selectedJob = j.job_id; $("#timeline-job").value = j.job_id; refresh(); });
    body.appendChild(tr);
  }
  const select = $("#timeline-job");
  const ids = jobs.map((j) => j.job_id);
  if (!selectedJob || !ids.includes(selectedJob)) selectedJob = ids[0] || null;
  select.replaceChildren(...jobs.map((j) => { const o = document.createElement("option"); o.value = j.job_id; o.textContent = `${j.job_id} ${j.name}`; return o; }));
  if (selectedJob) select.value = selectedJob;
}

function renderMarkets(rows) {
  const body = $("#markets tbody");
  body.replaceChildren();
  for (const m of rows) {
    const tr = document.createElement("tr");
    cell(tr, m.provider); cell(tr, m.zone); cell(tr, m.instance_type);
    cell(tr, m.attempts, "num"); cell(tr, m.preemptions, "num");
    cell(tr, m.running_h.toFixed(3), "num");
    cell(tr, m.mtbf_h === null ? "none seen" : m.mtbf_h.toFixed(3), "num");
    cell(tr, m.survival === null ? "—" : Math.round(100 * m.survival) + "%", "num");
    cell(tr, m.price_usd_per_hour.toFixed(3), "num");
    body.appendChild(tr);
  }
}

const LAYOUT = { margin: { l: 50, r: 10, t: 10, b: 40 }, font: { size: 11 }, showlegend: true };

function renderCost(series) {
  const x = series.time_unix_s.map((t) => new Date(t * 1000));
  Plotly.react("cost-chart", [
    { x, y: series.cost_usd, name: "spothop", mode: "lines", line: { color: "#2f6fdf" } },
    { x, y: series.on_demand_usd, name: "on-demand, same instance time", mode: "lines", line: { color: "#c0392b", dash: "dot" } },
  ], { ...LAYOUT, yaxis: { title: "USD" }, legend: { orientation: "h" } }, { displayModeBar: false, responsive: true });
}

function renderTimeline(tl) {
  const providers = [...new Set(tl.bars.map((b) => b.provider))];
  const traces = providers.map((p, i) => {
    const bars = tl.bars.filter((b) => b.provider === p);
    return {
      type: "bar", orientation: "h", name: p,
      y: bars.map((b) => "node " + b.node),
      base: bars.map((b) => new Date(b.start_unix_s * 1000)),
      x: bars.map((b) => ((b.end_unix_s || tl.now_unix_s) - b.start_unix_s) * 1000),
      text: bars.map((b) => `${b.zone} ${b.instance_type} ${b.market}`),
      textposition: "inside", insidetextanchor: "start", textangle: 0, constraintext: "none",
      hovertext: bars.map((b) => `${b.provider}/${b.zone} ${b.instance_type} (${b.market}) ${b.state}${b.end_reason ? ", " + b.end_reason : ""}`),
      marker: { color: PROVIDER_COLOURS[i % PROVIDER_COLOURS.length], line: { width: 1, color: "#1d2430" } },
    };
  });
  const pre = tl.bars.filter((b) => b.preempted);
  traces.push({
    type: "scatter", mode: "markers", name: "preempted",
    y: pre.map((b) => "node " + b.node), x: pre.map((b) => new Date(b.end_unix_s * 1000)),
    marker: { symbol: "x", size: 12, color: "#c0392b" },
  });
  Plotly.react("timeline-chart", traces, { ...LAYOUT, barmode: "overlay", xaxis: { type: "date" }, legend: { orientation: "h" } }, { displayModeBar: false, responsive: true });
  $("#timeline-chart").dataset.preemptions = String(pre.length);
  $("#timeline-chart").dataset.bars = String(tl.bars.length);
}

function addEvent(e) {
  const li = document.createElement("li");
  const reason = e.data.end_reason || e.data.reason || "";
  li.textContent = `${when(e.time_unix_s)} ${e.job_id} ${e.kind}${reason ? " (" + reason + ")" : ""}`;
  if (/preempt|notice/.test(e.kind + reason)) li.className = "preempt";
  const list = $("#events");
  list.appendChild(li);
  while (list.children.length > 300) list.removeChild(list.firstChild);
  list.scrollTop = list.scrollHeight;
}

async function refresh() {
  if (refreshing) { pending = true; return; }
  refreshing = true;
  try {
    const [jobs, markets] = await Promise.all([getJSON("api/jobs"), getJSON("api/markets")]);
    renderJobs(jobs);
    renderMarkets(markets);
    renderCost(await getJSON("api/cost"));
    if (selectedJob) renderTimeline(await getJSON("api/timeline?job=" + encodeURIComponent(selectedJob)));
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (err) {
    $("#updated").textContent = "error: " + err.message;
  } finally {
    refreshing = false;
    if (pending) { pending = false; refresh(); }
  }
}

async function start() {
  for (const e of await getJSON("api/events")) addEvent(e);
  await refresh();
  const stream = new EventSource("api/stream");
  stream.addEventListener("open", () => { $("#stream-state").textContent = "live"; $("#stream-state").className = "pill live"; });
  stream.addEventListener("error", () => { $("#stream-state").textContent = "reconnecting…"; $("#stream-state").className = "pill"; });
  stream.addEventListener("job", (m) => { addEvent(JSON.parse(m.data)); refresh(); });
  stream.addEventListener("tick", () => refresh());
  $("#timeline-job").addEventListener("change", (ev) => { selectedJob = ev.target.value; refresh(); });
}

start();
