// The streamjob dashboard: reads the job manager's REST API once a second and shows it.
// Job, operator and task names, paths and exception messages are the user's text: they only
// ever go into the page as textContent or attribute values, never as markup.
"use strict";

const POLL_MS = 1000;
const TOKEN_KEY = "streamjob.rest-token";
const HISTORY_ROWS = 50; // checkpoints shown

const $ = (id) => document.getElementById(id);
const SVG_NS = "http://www.w3.org/2000/svg";

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let needToken = false;
let job = null;
let timer = null;
let refreshing = false; // one refresh at a time: a button's refresh during a poll runs right after it
let again = false;
let graphKey = "";
let graphCells = new Map(); // operator id -> {in, out, wm}, vertex id -> {bp}
let exceptionsKey = "";

// -- elements -------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function cell(text, cls) {
  const td = el("td", cls ? { class: cls } : {});
  td.textContent = text;
  return td;
}

// -- formatting -----------------------------------------------------------------------------------

function count(n) { return n == null ? "–" : Number(n).toLocaleString("en-US"); }

function rate(n) {
  if (n == null) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M/s";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k/s";
  return n.toFixed(n > 0 && n < 10 ? 1 : 0) + "/s";
}

function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

function ms(n) {
  if (n == null) return "–";
  if (n >= 10000) return (n / 1000).toFixed(1) + " s";
  return Math.round(n) + " ms";
}

function clock(seconds) {
  if (seconds == null) return "–";
  const d = new Date(seconds * 1000);
  return d.toLocaleTimeString("en-GB", { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return h ? `${h}h ${m}m ${s}s` : m ? `${m}m ${s}s` : `${s}s`;
}

function eventTime(msSinceEpoch) {
  // ISO without the "T" and "Z": event time is UTC by convention
  return new Date(msSinceEpoch).toISOString().replace("T", " ").replace("Z", "");
}

// -- the REST API ---------------------------------------------------------------------------------

class Unauthorized extends Error {}

async function api(method, path, body) {
  const headers = {};
  if (token) headers["Authorization"] = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                   cache: "no-store" });
  if (resp.status === 401) throw new Unauthorized();
  let doc = null;
  try { doc = await resp.json(); } catch { doc = null; }
  if (!resp.ok) throw new Error(doc && doc.error ? doc.error : `${method} ${path}: HTTP ${resp.status}`);
  return doc;
}

function askForToken(reason) {
  needToken = true;
  $("token-reason").textContent = reason;
  $("token-form").hidden = false;
  $("token-input").focus();
}

// -- refresh --------------------------------------------------------------------------------------

async function refresh() {
  if (refreshing) { again = true; return; }
  clearTimeout(timer);
  if (needToken) return;
  refreshing = true;
  try {
    await load();
  } finally {
    refreshing = false;
  }
  if (needToken) return;
  if (again) { again = false; refresh(); } else timer = setTimeout(refresh, POLL_MS);
}

async function load() {
  let docs;
  try {
    // peek: the dashboard only watches; the job's final word stays for the client that waits for it
    docs = await Promise.all([
      api("GET", "v1/job?peek=true"), api("GET", `v1/checkpoints?limit=${HISTORY_ROWS}`),
      api("GET", "v1/savepoints"), api("GET", "v1/exceptions")]);
  } catch (e) {
    if (e instanceof Unauthorized) {
      askForToken(token ? "The REST token was not accepted; enter the job's rest.auth.token."
                        : "This job's REST API needs its bearer token (rest.auth.token).");
      return;
    }
    document.body.classList.add("stale");
    say(`Cannot reach the job manager (${e.message}): the job may have ended. Showing the last data; retrying.`,
        "connection");
    return;
  }
  const [j, checkpoints, savepoints, exceptions] = docs;
  job = j;
  document.body.classList.remove("stale");
  if ($("message").dataset.kind === "connection") say("");
  try {
    renderJob(j);
    renderGraph(j);
    renderCheckpoints(checkpoints);
    renderSavepoints(savepoints);
    renderExceptions(exceptions);
    renderQueryable(j.queryable_state || []);
  } catch (e) { // a bug of this page: say so, and keep polling
    console.error(e);
    say(`The page could not show the job's data: ${e.message}`, "render");
  }
}

function say(text, kind = "") {
  const m = $("message");
  m.textContent = text;
  m.dataset.kind = kind;
}

// -- job header -----------------------------------------------------------------------------------

function renderJob(j) {
  $("job-name").textContent = j.name;
  document.title = `${j.name} · streamjob`;
  const state = $("job-state");
  state.textContent = j.state;
  state.className = `badge state-${j.state.toLowerCase()}`;
  const end = j.end_time ?? Date.now() / 1000;
  const meta = [
    ["Job ID", j.id], ["Parallelism", `${j.parallelism} (max ${j.max_parallelism})` +
      (j.slots !== undefined && j.slots !== j.parallelism ? `, ${j.slots} slots` : "") +
      (j.executors != null ? ` on ${j.executors} executors` : "")],
    ["Uptime", duration(end - j.start_time)], ["Restarts", String(j.restarts)],
    ["Latest checkpoint", j.latest_checkpoint ? `#${j.latest_checkpoint.id} at ${j.latest_checkpoint.path}` : "none"],
  ];
  if (j.final_savepoint) meta.push(["Final savepoint", j.final_savepoint]);
  $("job-meta").replaceChildren(...meta.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v }))));
  const error = $("job-error");
  error.hidden = !j.error;
  error.textContent = j.error ? `Job failed: ${j.error}` : "";
  const running = j.state === "RUNNING";
  $("btn-savepoint").disabled = !running;
  $("btn-stop").disabled = !(running || j.state === "RESTARTING");
  $("btn-cancel").disabled = ["FINISHED", "FAILED", "CANCELED"].includes(j.state);
  $("savepoint-dir").placeholder = j.savepoint_dir ? `default: ${j.savepoint_dir}` : "required: no default configured";
}

// -- job graph ------------------------------------------------------------------------------------

function levels(vertices, edges) {
  // longest path from a source: each task one column right of its furthest input
  const level = new Map(vertices.map((v) => [v.id, 0]));
  // a loop's back-edge (e.feedback) points left: it does not push its head to the right
  const between = edges.filter((e) => !e.chained && !e.feedback && e.source_vertex !== e.target_vertex);
  for (let round = 0; round < vertices.length; round++) {
    let changed = false;
    for (const e of between) {
      const want = level.get(e.source_vertex) + 1;
      if (want > level.get(e.target_vertex)) { level.set(e.target_vertex, want); changed = true; }
    }
    if (!changed) break;
  }
  return level;
}

function partitionerLabel(e) {
  let label = e.partitioner;
  if (e.key) label += `(${e.key})`;
  if (e.side_output) label += ` [${e.side_output}]`;
  if (e.feedback) label += " feedback";
  return label;
}

function buildGraph(j) {
  const graph = $("graph");
  const edgesSvg = $("graph-edges");
  graph.replaceChildren(edgesSvg);
  graphCells = new Map();
  const level = levels(j.vertices, j.edges);
  const columns = [];
  for (const v of j.vertices) {
    const l = level.get(v.id);
    while (columns.length <= l) {
      const col = el("div", { class: "graph-col" });
      columns.push(col);
      graph.append(col);
    }
    const box = el("div", { class: "vertex", "data-vertex": String(v.id) });
    const head = el("div", { class: "vertex-head" });
    head.append(el("span", { class: "vertex-title", text: `Task ${v.id}` }),
                el("span", { class: "muted", text: `parallelism ${v.parallelism}` }));
    const busy = el("span", { class: "busy", text: "" });
    const bp = el("span", { class: "bp", text: "" });
    head.append(busy, bp);
    box.append(head);
    graphCells.set(`v${v.id}`, { bp, busy, box });
    v.operators.forEach((op, i) => {
      if (i > 0) box.append(el("div", { class: "chain-arrow", text: "↓ chained (forward)" }));
      const row = el("div", { class: "op", "data-operator": op.id });
      row.append(el("div", { class: "op-name", text: op.name, title: `${op.kind}${op.uid ? ", uid " + op.uid : ""}` }));
      const stats = el("div", { class: "op-stats" });
      const inRate = el("span", { class: "rate-in" }), outRate = el("span", { class: "rate-out" });
      stats.append("in ", inRate, " · out ", outRate);
      const wm = el("div", { class: "op-wm muted" });
      row.append(stats, wm);
      box.append(row);
      graphCells.set(op.id, { in: inRate, out: outRate, wm });
    });
    columns[level.get(v.id)].append(box);
  }
}

function drawEdges(j) {
  const graph = $("graph");
  const edgesSvg = $("graph-edges");
  const origin = graph.getBoundingClientRect();
  edgesSvg.setAttribute("width", graph.scrollWidth);
  edgesSvg.setAttribute("height", graph.scrollHeight);
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7",
                                 markerHeight: "7", orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }));
  defs.append(marker);
  const parts = [defs];
  const pairs = new Map(); // one line per pair of tasks, its labels joined
  for (const e of j.edges) {
    if (e.chained || e.source_vertex === e.target_vertex) continue;
    const key = `${e.source_vertex}->${e.target_vertex}`;
    if (!pairs.has(key)) pairs.set(key, { from: e.source_vertex, to: e.target_vertex, labels: [] });
    const label = partitionerLabel(e);
    if (!pairs.get(key).labels.includes(label)) pairs.get(key).labels.push(label);
  }
  for (const { from, to, labels } of pairs.values()) {
    const a = graph.querySelector(`.vertex[data-vertex="${from}"]`).getBoundingClientRect();
    const b = graph.querySelector(`.vertex[data-vertex="${to}"]`).getBoundingClientRect();
    const x1 = a.right - origin.left + graph.scrollLeft, y1 = a.top + a.height / 2 - origin.top + graph.scrollTop;
    const x2 = b.left - origin.left + graph.scrollLeft, y2 = b.top + b.height / 2 - origin.top + graph.scrollTop;
    const mx = (x1 + x2) / 2;
    parts.push(svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, class: "edge",
                             "marker-end": "url(#arrow)" }));
    const text = svg("text", { x: mx, y: (y1 + y2) / 2 - 6, class: "edge-label", "text-anchor": "middle" });
    text.textContent = labels.join(", ");
    parts.push(text);
  }
  edgesSvg.replaceChildren(...parts);
}

function renderGraph(j) {
  const key = JSON.stringify([j.vertices.map((v) => [v.id, v.name, v.operators.map((o) => o.id)]), j.edges]);
  if (key !== graphKey) {
    graphKey = key;
    buildGraph(j);
  }
  const rows = [], subtaskRows = [];
  for (const v of j.vertices) {
    const bp = v.backpressure;
    const bpText = `${bp.level} ${Math.round(bp.ratio * 100)}%`;
    const cells = graphCells.get(`v${v.id}`);
    const bpCell = cells.bp;
    bpCell.textContent = `back pressure ${bpText}`;
    bpCell.className = `bp bp-${bp.level.toLowerCase()}`;
    bpCell.title = bp.subtasks.map((s) => `subtask ${s.subtask}: ${Math.round(s.ratio * 100)}%` +
                                           (s.back_pressured ? " (now)" : "")).join("\n");
    // As Flink's web UI: a vertex from blue (idle) to red (busy), dark grey where back pressure dominates.
    cells.busy.textContent = `busy ${Math.round(v.busy_ratio * 100)}%`;
    cells.box.style.background = bp.ratio > v.busy_ratio ? `hsl(210, 8%, ${95 - 35 * bp.ratio}%)`
      : `hsl(${210 - 210 * v.busy_ratio}, 70%, ${96 - 14 * v.busy_ratio}%)`;
    cells.box.dataset.busy = String(v.busy_ratio);
    for (const s of bp.subtasks) {
      const tr = el("tr", { "data-task": String(v.id), "data-subtask": String(s.subtask) });
      tr.append(cell(`Task ${v.id}`), cell(String(s.subtask), "num"), cell(String(Math.round(s.busyTimeMsPerSecond)), "num busy-ms"),
                cell(String(Math.round(s.backPressuredTimeMsPerSecond)), "num bp-ms"),
                cell(String(Math.round(s.idleTimeMsPerSecond)), "num idle-ms"), cell(s.state));
      subtaskRows.push(tr);
    }
    for (const op of v.operators) {
      const c = graphCells.get(op.id);
      c.in.textContent = rate(op.records_in_per_second);
      c.out.textContent = rate(op.records_out_per_second);
      c.wm.textContent = op.watermark ? `watermark ${eventTime(op.watermark.low)}` : "";
      c.wm.title = op.watermark ? Object.entries(op.watermark.subtasks).map(([s, w]) => `subtask ${s}: ${w}`).join("\n") : "";
      const tr = el("tr", { "data-operator": op.id });
      tr.append(cell(op.name), cell(`Task ${v.id}`), cell(count(op.records_in), "num records-in"),
                cell(rate(op.records_in_per_second), "num"), cell(count(op.records_out), "num records-out"),
                cell(rate(op.records_out_per_second), "num"),
                cell(op.watermark ? eventTime(op.watermark.low) : "–"),
                cell(bpText, `bp-${bp.level.toLowerCase()}`));
      rows.push(tr);
    }
  }
  $("operators").tBodies[0].replaceChildren(...rows);
  $("subtasks").tBodies[0].replaceChildren(...subtaskRows);
  drawEdges(j);
}

// -- checkpoints and savepoints -------------------------------------------------------------------

function renderCheckpoints(doc) {
  const summary = $("checkpoint-summary");
  if (doc.enabled === false) {
    summary.textContent = "Checkpointing is off (execution.checkpointing.interval is not set).";
  } else {
    const c = doc.counts;
    let text = `${c.completed} completed, ${c.failed} failed, ${c.in_progress} in progress.`;
    const r = doc.latest && doc.latest.restored;
    if (r) text += ` Restored from ${r.kind} #${r.id} at ${r.path} (${clock(r.restore_time)}).`;
    summary.textContent = text;
  }
  const rows = doc.history.map((h) => {
    const tr = el("tr", { class: `status-${h.status.toLowerCase()}`, "data-checkpoint": String(h.id) });
    const type = h.checkpoint_type === "UNALIGNED_CHECKPOINT" ? "unaligned" :
                 h.checkpoint_type === "SAVEPOINT" ? "savepoint" : "aligned";
    tr.append(cell(String(h.id), "num"), cell(type), cell(h.status, "status"), cell(clock(h.trigger_time)),
              cell(ms(h.duration_ms), "num"), cell(bytes(h.checkpointed_size), "num"), cell(bytes(h.state_size), "num"),
              cell(ms(h.max_alignment_ms), "num"), cell(ms(h.max_start_delay_ms), "num"),
              cell(bytes(h.persisted_data), "num"),
              cell(h.feedback_records ? `${bytes(h.feedback_logged)} (${h.feedback_records} records)` : "–", "num"),
              cell(String(h.acks ?? "–"), "num"),
              cell(h.failure || "", "failure"));
    return tr;
  });
  $("checkpoints").tBodies[0].replaceChildren(...rows);
}

function renderSavepoints(doc) {
  const rows = doc.savepoints.map((s) => {
    const tr = el("tr", { class: `status-${s.status.toLowerCase()}`, "data-savepoint": s.id });
    const kind = s.stop ? (s.drain ? "stop (drain)" : "stop") : "savepoint";
    tr.append(cell(s.id), cell(s.status, "status"), cell(clock(s.requested_time)), cell(clock(s.completed_time)),
              cell(s.path, "path"), cell(kind), cell(s.error || "", "failure"));
    return tr;
  });
  if (!rows.length) {
    const tr = el("tr");
    tr.append(el("td", { colspan: "7", class: "muted", text: "No savepoint was triggered on this job." }));
    rows.push(tr);
  }
  $("savepoints").tBodies[0].replaceChildren(...rows);
}

// -- exceptions -----------------------------------------------------------------------------------

function failureBlock(f, root) {
  const block = el("details", { class: root ? "failure root" : "failure" });
  if (root) block.open = true;
  const summary = el("summary");
  summary.append(el("span", { class: "when", text: clock(f.time) }), " ",
                 el("span", { class: "cause", text: f.cause }), " ", el("span", { class: "what", text: f.summary }));
  block.append(summary);
  if (f.traceback) block.append(el("pre", { class: "traceback", text: f.traceback }));
  return block;
}

function renderExceptions(doc) {
  const key = JSON.stringify([doc.total, doc.history.map((h) => [h.attempt, h.concurrent.length])]);
  if (key === exceptionsKey) return; // unchanged: keep what the user opened or closed
  exceptionsKey = key;
  const box = $("exceptions");
  if (!doc.history.length) {
    box.replaceChildren(el("p", { class: "muted", text: "No task failed." }));
    return;
  }
  const parts = [];
  if (doc.truncated) parts.push(el("p", { class: "muted", text: `${doc.total} failures in all; the oldest are not kept.` }));
  for (const h of doc.history) {
    const attempt = el("div", { class: "attempt", "data-attempt": String(h.attempt) });
    attempt.append(el("h3", { text: `Attempt ${h.attempt + 1}: root cause` }), failureBlock(h.root, true));
    if (h.concurrent.length) {
      const more = el("details", { class: "concurrent" });
      more.append(el("summary", { text: `${h.concurrent.length} more failure(s) in this attempt` }),
                  ...h.concurrent.map((f) => failureBlock(f, false)));
      attempt.append(more);
    }
    parts.push(attempt);
  }
  box.replaceChildren(...parts);
}

// -- queryable state: a lookup box per name -----------------------------------------------------------

function renderQueryable(names) {
  const box = $("queryable");
  $("queryable-section").hidden = names.length === 0;
  const shown = [...box.querySelectorAll("form")].map((f) => f.dataset.name);
  if (shown.join("\n") === names.join("\n")) return; // keep what the user typed and the answers
  box.replaceChildren(...names.map((name) => {
    const input = el("input", { type: "text", placeholder: "key", spellcheck: "false", "aria-label": `key of ${name}` });
    const out = el("output", { class: "lookup-result" });
    const form = el("form", { class: "lookup", "data-name": name },
                    el("label", {}, el("code", {}, name), " ", input), el("button", { type: "submit" }, "Look up"), out);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      try {
        const r = await api("GET", `v1/state/${encodeURIComponent(name)}?key=${encodeURIComponent(key)}`);
        out.textContent = r.found ? `${JSON.stringify(r.value)}  (subtask ${r.subtask + 1}, key group ${r.key_group}, `
          + `at or after checkpoint ${r.checkpoint})` : "no value for this key";
        out.dataset.found = String(r.found);
      } catch (e) {
        if (e instanceof Unauthorized) askForToken("The REST token was not accepted; enter the job's rest.auth.token.");
        else out.textContent = `Failed: ${e.message}`;
        out.dataset.found = "error";
      }
    });
    return form;
  }));
}

// -- actions --------------------------------------------------------------------------------------

async function act(button, run) {
  button.disabled = true;
  try {
    say(await run(), "action");
  } catch (e) {
    if (e instanceof Unauthorized) askForToken("The REST token was not accepted; enter the job's rest.auth.token.");
    else say(`Failed: ${e.message}`, "action");
  } finally {
    refresh();
  }
}

$("btn-savepoint").addEventListener("click", (ev) => act(ev.currentTarget, async () => {
  const dir = $("savepoint-dir").value.trim();
  const r = await api("POST", "v1/savepoints", dir ? { target_dir: dir } : {});
  return `Savepoint ${r.id} triggered: ${r.path} (its status is in the table below)`;
}));

$("btn-stop").addEventListener("click", (ev) => {
  if (!confirm("Stop the job? Its sources end their input, in-flight records drain and the final checkpoint commits.")) return;
  act(ev.currentTarget, async () => { await api("POST", "v1/stop"); return "Stopping: sources end, in-flight records drain."; });
});

$("btn-cancel").addEventListener("click", (ev) => {
  if (!confirm("Cancel the job now? No final checkpoint is taken; retained checkpoints follow the retention setting.")) return;
  act(ev.currentTarget, async () => { await api("POST", "v1/cancel"); return "Canceling."; });
});

$("btn-token").addEventListener("click", () => askForToken("Enter the job's REST token (rest.auth.token)."));

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token-input").value.trim();
  if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
  $("token-input").value = "";
  $("token-form").hidden = true;
  needToken = false;
  refresh();
});

window.addEventListener("resize", () => { if (job) drawEdges(job); });

refresh();
