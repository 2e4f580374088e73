// The agentry console (docs/console.md §14): the worker tree, a worker's watch, the catalog and
// the replicas, live over server-sent events. No library, no build step: served as is.
"use strict";

const API = "/console/api";
const OPEN = new Set(["pending", "running", "input_required"]);
const $ = (id) => document.getElementById(id);

const state = {
  session: null,
  nodes: new Map(), // worker id -> {w, line, li, row, ul, own, total}
  tree: null,
  watch: null, // {id, source}
  agents: null,
  // Burst render times in ms (message received -> painted), read by the benchmark.
  renders: [],
};
window.agentryConsole = state;

// ---- small helpers ----------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function stateName(s) {
  return (s || "WORKER_STATE_UNSPECIFIED").replace("WORKER_STATE_", "").toLowerCase();
}

function enumName(prefix, v) {
  return (v || "").replace(prefix, "").toLowerCase();
}

function ms(ts) {
  return ts ? Date.parse(ts) : 0;
}

function duration(msecs) {
  const s = Math.max(0, Math.round(msecs / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

function tokens(u) {
  return u ? Number(u.totalTokens || 0) : 0;
}

function announce(text) {
  $("announcer").textContent = text;
}

async function call(method, path, body) {
  const headers = { "content-type": "application/json" };
  if (state.session && state.session.csrf) headers["x-agentry-csrf"] = state.session.csrf;
  const resp = await fetch(API + path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  const json = text ? JSON.parse(text) : {};
  if (!resp.ok) {
    const e = new Error(json.error ? `${json.error.code}: ${json.error.message}` : `HTTP ${resp.status}`);
    e.status = resp.status;
    throw e;
  }
  return json;
}

// ---- session ----------------------------------------------------------------------------

async function boot() {
  try {
    state.session = await call("GET", "/session");
    start();
  } catch (e) {
    if (e.status === 401) showLogin("");
    else showLogin(e.message);
  }
}

function showLogin(message) {
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("conn").textContent = "";
  $("token").focus();
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    state.session = await call("POST", "/session", { token: $("token").value });
    $("token").value = "";
    start();
  } catch (e) {
    $("login-error").textContent = e.message;
  }
});

$("logout").addEventListener("click", async () => {
  try { await call("DELETE", "/session"); } catch (e) { /* gone already */ }
  location.reload();
});

function start() {
  const s = state.session;
  $("login").hidden = true;
  $("app").hidden = false;
  $("who").textContent = s.auth ? `${s.principal}${s.operator ? " (operator)" : ""}` : "no authentication";
  $("logout").hidden = !s.auth;
  document.querySelector('.tab[data-view="replicas"]').hidden = !s.operator;
  $("f-principal-label").hidden = !(s.operator && s.auth);
  connectTree();
  connectAgents();
}

// ---- views ------------------------------------------------------------------------------

for (const tab of document.querySelectorAll(".tab")) {
  tab.addEventListener("click", () => showView(tab.dataset.view));
}

function showView(view) {
  for (const tab of document.querySelectorAll(".tab")) {
    tab.setAttribute("aria-pressed", String(tab.dataset.view === view));
  }
  $("view-workers").hidden = view !== "workers";
  $("watch").hidden = view !== "workers" || !state.watch;
  $("view-agents").hidden = view !== "agents";
  $("view-replicas").hidden = view !== "replicas";
  if (view === "replicas") loadReplicas();
}

// ---- the tree ---------------------------------------------------------------------------

function connectTree() {
  const source = new EventSource(`${API}/tree`);
  state.tree = source;
  source.addEventListener("open", () => {
    $("conn").textContent = "live";
    $("conn").classList.remove("down");
  });
  source.addEventListener("error", () => {
    // The browser reconnects by itself; the server then sends the tree again.
    $("conn").textContent = "reconnecting…";
    $("conn").classList.add("down");
  });
  source.addEventListener("failure", (ev) => {
    const body = JSON.parse(ev.data);
    $("conn").textContent = body.error ? body.error.message : "stream failed";
    $("conn").classList.add("down");
    if (body.error && body.error.code === "UNAUTHENTICATED") {
      source.close();
      showLogin(body.error.message);
    }
  });
  source.addEventListener("snapshot", (ev) => timed(() => applySnapshot(JSON.parse(ev.data))));
  source.addEventListener("workers", (ev) => timed(() => applyBurst(JSON.parse(ev.data))));
}

// Runs a burst's DOM work and records the time until the frame after it has been painted.
function timed(work) {
  const t0 = performance.now();
  work();
  requestAnimationFrame(() => setTimeout(() => {
    state.renders.push(performance.now() - t0);
    if (state.renders.length > 1000) state.renders.shift();
  }, 0));
}

function applySnapshot(msg) {
  const keep = new Set(msg.workers.map((w) => w.id));
  for (const [id, n] of state.nodes) {
    if (!keep.has(id)) {
      n.li.remove();
      state.nodes.delete(id);
    }
  }
  const sorted = msg.workers.slice().sort((a, b) => ms(a.createTime) - ms(b.createTime));
  applyWorkers(sorted, msg.lastProgress || {});
  $("truncated").hidden = !msg.truncated;
}

function applyBurst(msg) {
  const changed = applyWorkers(msg.workers, msg.lastProgress || {});
  const finished = changed.filter((n) => !OPEN.has(stateName(n.w.state)));
  const asking = changed.filter((n) => stateName(n.w.state) === "input_required");
  const parts = [`${changed.length} worker${changed.length === 1 ? "" : "s"} changed`];
  if (finished.length) parts.push(`${finished.length} finished`);
  if (asking.length) parts.push(`${asking.length} waiting for input`);
  announce(parts.join(", "));
}

function applyWorkers(list, lines) {
  const touched = [];
  for (const w of list) {
    let n = state.nodes.get(w.id);
    if (n && Number(n.w.sequence || 0) > Number(w.sequence || 0)) continue; // older than shown
    if (!n) {
      n = createNode(w);
      state.nodes.set(w.id, n);
    }
    n.w = w;
    if (lines[w.id] !== undefined) n.line = lines[w.id];
    touched.push(n);
  }
  // Place new nodes (and any that waited for their parent) under their parent.
  for (const n of touched) place(n);
  for (const n of state.nodes.values()) if (n.orphan && state.nodes.has(n.w.parentId)) place(n);
  const dirty = new Set();
  for (const n of touched) {
    n.own = tokens(n.w.usage);
    for (let p = n; p; p = state.nodes.get(p.w.parentId)) {
      if (dirty.has(p)) break;
      dirty.add(p);
    }
  }
  // Subtree totals, deepest first.
  const order = [...dirty].sort((a, b) => (b.w.depth || 0) - (a.w.depth || 0));
  for (const n of order) {
    let total = n.own;
    for (const c of n.ul.children) {
      const cn = state.nodes.get(c.dataset.workerId);
      if (cn) total += cn.total;
    }
    n.total = total;
  }
  for (const n of dirty) render(n);
  refreshFilters(list);
  $("counts").textContent = counts();
  if (state.watch) {
    const n = state.nodes.get(state.watch.id);
    if (n) showFacts(n.w);
  }
  return touched;
}

function createNode(w) {
  const row = el("div", { class: "row" },
    el("span", { class: "state" }),
    el("span", { class: "name" }, el("span", { class: "agent" }), " ", el("span", { class: "desc" })),
    el("span", { class: "age num" }),
    el("span", { class: "usage num" }),
    el("span", { class: "latest" }));
  const ul = el("ul", { role: "group" });
  const li = el("li", { role: "treeitem", tabindex: "-1", "data-worker-id": w.id }, row, ul);
  row.addEventListener("click", () => openWatch(w.id));
  return { w, line: "", li, row, ul, own: 0, total: 0, orphan: false, placed: false };
}

function place(n) {
  const parent = n.w.parentId && state.nodes.get(n.w.parentId);
  const target = parent ? parent.ul : $("tree");
  if (n.placed && n.li.parentElement === target) return;
  n.orphan = !!n.w.parentId && !parent;
  n.placed = true;
  // Children in creation order; the new one is usually the newest.
  const at = ms(n.w.createTime);
  let before = null;
  for (let c = target.lastElementChild; c; c = c.previousElementSibling) {
    const cn = state.nodes.get(c.dataset.workerId);
    if (cn && ms(cn.w.createTime) > at) before = c;
    else break;
  }
  target.insertBefore(n.li, before);
  if (!$("tree").querySelector('[tabindex="0"]')) n.li.tabIndex = 0;
}

function render(n) {
  const w = n.w;
  const s = stateName(w.state);
  const [stateCell, nameCell, ageCell, usageCell, latestCell] = n.row.children;
  stateCell.textContent = s;
  stateCell.className = `state s-${s}`;
  nameCell.children[0].textContent = w.agent;
  nameCell.children[1].textContent = w.description || "";
  nameCell.title = `${w.id}${w.caller ? ` · principal ${w.caller}` : ""} · depth ${w.depth || 0}`;
  ageCell.textContent = age(w);
  usageCell.textContent = n.own || n.total ? `${n.own} / ${n.total}` : "";
  let latest = n.line || "";
  let cls = "latest";
  if (s === "input_required" && w.question) {
    latest = `asks: ${w.question}`;
    cls += " question";
  } else if ((s === "failed" || s === "killed") && w.error) {
    latest = w.error;
    cls += " error";
  } else if (s === "completed" && w.result && !latest) {
    latest = w.result;
  }
  latestCell.textContent = latest;
  latestCell.title = latest;
  latestCell.className = cls;
  n.li.dataset.state = s;
  n.li.dataset.agent = w.agent;
  n.li.dataset.principal = w.caller || "";
  n.li.setAttribute("aria-level", String((w.depth || 0) + 1));
  n.li.setAttribute("aria-label", `${w.agent}, ${s}${w.description ? `, ${w.description}` : ""}`);
  applyFilter(n);
}

function age(w) {
  const s = stateName(w.state);
  const started = ms(w.startTime) || ms(w.createTime);
  if (OPEN.has(s)) return duration(Date.now() - started);
  return duration((ms(w.closeTime) || Date.now()) - started);
}

// Ages of unfinished workers move on by themselves.
setInterval(() => {
  for (const n of state.nodes.values()) {
    if (OPEN.has(stateName(n.w.state))) n.row.children[2].textContent = age(n.w);
  }
}, 1000);

function counts() {
  const by = {};
  for (const n of state.nodes.values()) {
    const s = stateName(n.w.state);
    by[s] = (by[s] || 0) + 1;
  }
  return `${state.nodes.size} workers: ` + Object.entries(by).map(([k, v]) => `${v} ${k}`).join(", ");
}

// ---- filters ----------------------------------------------------------------------------

function refreshFilters(list) {
  addOptions($("f-agent"), list.map((w) => w.agent));
  addOptions($("f-principal"), list.map((w) => w.caller || ""));
}

function addOptions(select, values) {
  const have = new Set([...select.options].map((o) => o.value));
  for (const v of values) {
    if (v && !have.has(v)) {
      select.append(el("option", { text: v }));
      have.add(v);
    }
  }
}

function matches(n) {
  const s = stateName(n.w.state);
  const fs = $("f-state").value;
  if (fs === "open" ? !OPEN.has(s) : fs && fs !== s) return false;
  const fa = $("f-agent").value;
  if (fa && fa !== n.w.agent) return false;
  const fp = $("f-principal").value;
  return !(fp && fp !== n.w.caller);
}

function applyFilter(n) {
  n.li.classList.toggle("filtered", !matches(n));
}

for (const id of ["f-state", "f-agent", "f-principal"]) {
  $(id).addEventListener("change", () => {
    for (const n of state.nodes.values()) applyFilter(n);
  });
}

// ---- keyboard ---------------------------------------------------------------------------

$("tree").addEventListener("keydown", (ev) => {
  const item = ev.target.closest('[role="treeitem"]');
  if (!item) return;
  const rows = [...$("tree").querySelectorAll('[role="treeitem"]:not(.filtered)')];
  const i = rows.indexOf(item);
  let next = null;
  if (ev.key === "ArrowDown") next = rows[i + 1];
  else if (ev.key === "ArrowUp") next = rows[i - 1];
  else if (ev.key === "Home") next = rows[0];
  else if (ev.key === "End") next = rows[rows.length - 1];
  else if (ev.key === "Enter" || ev.key === " ") {
    ev.preventDefault();
    openWatch(item.dataset.workerId);
    return;
  } else return;
  ev.preventDefault();
  if (next) focusItem(next);
});

function focusItem(li) {
  for (const t of $("tree").querySelectorAll('[role="treeitem"][tabindex="0"]')) t.tabIndex = -1;
  li.tabIndex = 0;
  li.focus();
}

document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && state.watch) closeWatch();
});

// ---- a worker's watch -------------------------------------------------------------------

function openWatch(id) {
  closeWatch(true);
  const n = state.nodes.get(id);
  if (n) {
    n.row.classList.add("selected");
    focusItem(n.li);
  }
  $("watch").hidden = false;
  $("watch-title").textContent = n ? `${n.w.agent} · ${id}` : id;
  $("events").replaceChildren();
  $("action-status").textContent = "";
  $("action-status").className = "";
  if (n) showFacts(n.w);
  const source = new EventSource(`${API}/workers/${encodeURIComponent(id)}/watch`);
  state.watch = { id, source };
  source.addEventListener("event", (ev) => addEvent(JSON.parse(ev.data)));
  source.addEventListener("end", () => source.close());
  source.addEventListener("failure", (ev) => {
    const body = JSON.parse(ev.data);
    $("events").append(el("li", { class: "error", text: body.error ? body.error.message : "watch failed" }));
    source.close();
  });
  $("watch").focus();
}

function closeWatch(reopening) {
  if (!state.watch) return;
  state.watch.source.close();
  const n = state.nodes.get(state.watch.id);
  state.watch = null;
  if (n) n.row.classList.remove("selected");
  if (!reopening) {
    $("watch").hidden = true;
    if (n) focusItem(n.li);
  }
}

$("watch-close").addEventListener("click", () => closeWatch());

function showFacts(w) {
  const s = stateName(w.state);
  const facts = [
    ["state", s], ["agent", w.agent], ["description", w.description || ""],
    ["principal", w.caller || ""], ["parent", w.parentId || "(top level)"], ["depth", String(w.depth || 0)],
    ["created", w.createTime || ""], ["tokens", w.usage ? `${tokens(w.usage)}` : ""],
  ];
  if (w.question) facts.push(["asks", w.question]);
  if (w.error) facts.push(["error", w.error]);
  if (w.result) facts.push(["result", w.result]);
  if (w.continuedBy) facts.push(["continued by", w.continuedBy]);
  $("facts").replaceChildren(...facts.filter(([, v]) => v !== "").flatMap(([k, v]) =>
    [el("dt", { text: k }), el("dd", { text: v })]));
  $("stop-form").hidden = !OPEN.has(s);
  $("message-label").textContent = s === "input_required" ? "Answer" : OPEN.has(s) ? "Message" : "Follow-up";
}

function addEvent(ev) {
  const w = ev.worker || {};
  const when = ev.time ? new Date(ev.time).toLocaleTimeString() : "";
  let text;
  if (ev.progress) {
    const kind = enumName("PROGRESS_KIND_", ev.progress.kind);
    text = `${kind}: ${ev.progress.text || ""}${ev.progress.dataJson ? ` ${ev.progress.dataJson}` : ""}`;
  } else {
    text = `state ${stateName(ev.state)}`;
    if (w.question && stateName(ev.state) === "input_required") text += ` — asks: ${w.question}`;
    if (w.error) text += ` — ${w.error}`;
    if (w.result) text += ` — result: ${w.result}`;
    if (w.structuredResult) text += ` — ${w.structuredResult}`;
    for (const a of w.artifacts || []) text += ` — artifact ${a.artifactId}${a.name ? ` (${a.name})` : ""}`;
  }
  $("events").append(el("li", { value: String(ev.sequence || 0) },
    el("span", { class: "kind", text: `${when} ` }), text));
  if (w.id) showFacts(w);
}

$("stop-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (!state.watch) return;
  const reason = $("stop-reason").value.trim() || "stopped from the console";
  await act(`/workers/${encodeURIComponent(state.watch.id)}/stop`, { reason }, "stopped");
});

$("message-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (!state.watch) return;
  const text = $("message-text").value;
  const r = await act(`/workers/${encodeURIComponent(state.watch.id)}/message`, { text }, "message sent");
  if (r) {
    $("message-text").value = "";
    if (r.continued && r.worker) $("action-status").textContent = `message sent: continued by ${r.worker.id}`;
  }
});

async function act(path, body, done) {
  const status = $("action-status");
  try {
    const r = await call("POST", path, body);
    status.className = "";
    status.textContent = done;
    return r;
  } catch (e) {
    status.className = "error";
    status.textContent = e.message;
    return null;
  }
}

// ---- agents -----------------------------------------------------------------------------

function connectAgents(workspace) {
  if (state.agents) state.agents.close();
  const query = workspace ? `?workspace=${encodeURIComponent(workspace)}` : "";
  const source = new EventSource(`${API}/agents${query}`);
  state.agents = source;
  source.addEventListener("agents", (ev) => renderAgents(JSON.parse(ev.data)));
  source.addEventListener("failure", (ev) => {
    const body = JSON.parse(ev.data);
    $("agents-meta").textContent = body.error ? `${body.error.code}: ${body.error.message}` : "catalog stream failed";
    source.close();
  });
}

$("workspace-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  connectAgents($("workspace").value.trim());
});

const HONOURED = [
  ["tools", (a) => a.tools && `tools: ${(a.tools.values || []).join(", ") || "(none)"}`],
  ["disallowedTools", (a) => a.disallowedTools && `disallowed: ${(a.disallowedTools.values || []).join(", ")}`],
  ["spawns", (a) => a.spawns !== undefined && `spawns: ${a.spawns || "(none)"}`],
  ["model", (a) => a.model && a.model.length && `model: ${a.model.join(", ")}`],
  ["outputSchema", (a) => a.outputSchema && "output schema"],
  ["maxTurns", (a) => a.maxTurns && `max turns: ${a.maxTurns}`],
  ["timeoutMins", (a) => a.timeoutMins && `timeout: ${a.timeoutMins} min`],
  ["permissionMode", (a) => a.permissionMode && `mode: ${a.permissionMode}`],
  ["isolation", (a) => a.isolation && `isolation: ${a.isolation}`],
  ["skills", (a) => a.skills && a.skills.length && `skills: ${a.skills.join(", ")}`],
  ["remote", (a) => a.remote && "remote A2A agent"],
];

function renderAgents(msg) {
  const diags = msg.diagnostics || [];
  const agents = msg.agents || [];
  $("agents-meta").textContent =
    `${agents.length} agents · registry version ${msg.registryVersion || ""} · ${diags.length} diagnostics`;
  const byFile = new Map();
  for (const d of diags) {
    if (!byFile.has(d.path)) byFile.set(d.path, []);
    byFile.get(d.path).push(d);
  }
  $("diagnostics").replaceChildren(...diags.map((d) => {
    const sev = enumName("SEVERITY_", d.severity) || "warning";
    return el("li", { class: `sev-${sev}` },
      el("strong", { text: sev }), ` ${d.path}${d.line ? `:${d.line}` : ""} `,
      el("code", { text: d.code || "" }), ` ${d.message}`);
  }));
  $("agents").tBodies[0].replaceChildren(...agents.map((a) => {
    const honoured = HONOURED.map(([, f]) => f(a)).filter(Boolean).join("; ");
    let extra = [];
    try { extra = Object.keys(JSON.parse(a.extraJson || "{}")); } catch (e) { extra = []; }
    const unsupported = (byFile.get(a.filePath) || []).filter((d) => d.code === "unsupported_field")
      .map((d) => d.message);
    const not = [...unsupported, ...extra.map((k) => `${k} (kept, not used)`)].join("; ");
    return el("tr", { "data-agent": a.name },
      el("td", { text: a.name }), el("td", { text: enumName("SOURCE_", a.source) }),
      el("td", { text: a.filePath || "(bundled)" }), el("td", { text: honoured }), el("td", { text: not }));
  }));
  $("shadowed").tBodies[0].replaceChildren(...(msg.shadowed || []).map((a) =>
    el("tr", {}, el("td", { text: a.name }), el("td", { text: enumName("SOURCE_", a.source) }),
      el("td", { text: a.filePath || "(bundled)" }), el("td", { text: a.shadowedBy || "" }))));
}

// ---- replicas ---------------------------------------------------------------------------

async function loadReplicas() {
  try {
    const r = await call("GET", "/replicas");
    const now = Date.now();
    $("replicas").tBodies[0].replaceChildren(...r.replicas.map((x) => el("tr", {},
      el("td", { text: `${x.name} (${x.id})${x.self ? " — this replica" : ""}` }),
      el("td", { text: new Date(Number(x.startedMs)).toLocaleString() }),
      el("td", { text: `${duration(now - Number(x.renewedMs))} ago` }),
      el("td", { text: duration(Number(x.expiresMs) - now) }),
      el("td", { text: `${x.openWorkers}${x.workers.length ? `: ${x.workers.join(", ")}` : ""}` }))));
    $("replicas-note").textContent = r.shared ? "" : "This replica is alone with its SQLite store.";
  } catch (e) {
    $("replicas-note").textContent = e.message;
  }
}

$("replicas-refresh").addEventListener("click", loadReplicas);

boot();
