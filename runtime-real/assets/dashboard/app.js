// The dashboard page: one stream, every change pushed by the server.
// Every event has an id; a reconnect resumes after the last one applied
// (the browser's Last-Event-ID, or ?last_event_id= when the stream is
// reconnected on purpose). `window.__dash` exposes the page's state to
// tests and the latency benchmark.
(function () {
  "use strict";
  const token = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const dash = {
    lastId: null, nodes: new Map(), logs: new Map(), offsets: new Map(),
    groups: [], pipeline: null, readOnly: false, upRunning: false,
    hellos: [], gaps: [], duplicates: 0, applied: 0, counts: {}, latencies: [], transitions: [],
    confirm: (question) => window.confirm(question),
  };
  window.__dash = dash;
  const q = (s) => encodeURIComponent(s);
  const api = (path) => path + (path.includes("?") ? "&" : "?") + "token=" + q(token);

  // Theme: the system's preference unless the toggle chose one (kept).
  const root = document.documentElement;
  const saved = localStorage.getItem("drover-theme");
  if (saved === "dark" || saved === "light") root.dataset.theme = saved;
  function theme() {
    if (root.dataset.theme) return root.dataset.theme;
    return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  function showTheme() {
    const t = theme();
    $("theme").textContent = t === "dark" ? "Light theme" : "Dark theme";
    $("theme").setAttribute("aria-label", "Switch to the " + (t === "dark" ? "light" : "dark") + " theme");
  }
  $("theme").addEventListener("click", () => {
    root.dataset.theme = theme() === "dark" ? "light" : "dark";
    localStorage.setItem("drover-theme", root.dataset.theme);
    showTheme();
  });
  showTheme();

  function age(ms) {
    if (ms == null) return "-";
    let s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    return (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
  }
  function text(el, value) { el.textContent = value == null || value === "" ? "-" : String(value); }

  // Cards, by node, and each card's fields by name (no query per update).
  const cards = new Map();
  function card(id) {
    let el = cards.get(id);
    if (el && el.isConnected) return el;
    el = document.createElement("article");
    el.className = "card";
    el.dataset.node = id;
    el.tabIndex = 0;
    el.setAttribute("role", "listitem");
    el.innerHTML =
      '<h3><span class="id"></span><span class="stage"></span></h3><dl>' +
      ["group", "liveness", "provider", "lease", "endpoint", "gpu", "price", "uptime", "in stage", "failure"]
        .map((k) => "<dt>" + k + '</dt><dd data-f="' + k + '"></dd>').join("") +
      '</dl><pre class="tail" tabindex="-1" aria-label="log tail"></pre>' +
      '<button type="button" class="full">Full log</button>' +
      '<button type="button" class="kill">Kill (drill)</button>' +
      '<button type="button" class="remove">Remove</button>';
    el.querySelector(".id").textContent = id;
    el.querySelector(".full").setAttribute("aria-label", "Full log of " + id);
    el.querySelector(".remove").setAttribute("aria-label", "Remove " + id + ": destroy its lease, not replaced");
    el.querySelector(".kill").setAttribute("aria-label", "Kill " + id + "'s agent, as a crash would (a drill)");
    el.querySelector(".kill").addEventListener("click", (e) => {
      e.stopPropagation();
      control("Kill " + id + "'s agent (a drill)? It exits as in a crash; the node fails, " +
        "and with bounded replacement a new one takes its place.",
        "/api/nodes/" + q(id) + "/kill", id + ": killed (a drill)");
    });
    el.querySelector(".remove").addEventListener("click", (e) => {
      e.stopPropagation();
      control("Remove " + id + "? Its lease is destroyed and it is not replaced.",
        "/api/nodes/" + q(id) + "/remove", id + ": removal asked for");
    });
    el.querySelector(".full").addEventListener("click", (e) => { e.stopPropagation(); openLog(id); });
    el.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && e.target === el) { e.preventDefault(); openLog(id); }
    });
    el.fields = {};
    for (const dd of el.querySelectorAll("[data-f]")) el.fields[dd.dataset.f] = dd;
    const tail = el.querySelector(".tail");
    // Whether the tail follows its end, kept on scroll (so writing lines
    // never has to read the layout first).
    tail.pinned = true;
    tail.addEventListener("scroll", () => { tail.pinned = tail.scrollTop + tail.clientHeight >= tail.scrollHeight - 4; });
    const fleet = $("fleet");
    const after = [...fleet.children].find((c) => c.dataset.node > id);
    fleet.insertBefore(el, after || null);
    cards.set(id, el);
    return el;
  }
  function field(el, name, value) {
    const dd = el.fields[name];
    const v = value == null || value === "" ? "-" : String(value);
    if (dd.textContent !== v) dd.textContent = v;
  }
  function liveness(n) {
    if (n.stage === "Destroyed") return "gone";
    if (!dash.upRunning) return "unknown (run stopped)";
    if (n.liveness) {
      const beat = n.last_heartbeat_ms == null ? "" : ", heartbeat " + age(n.last_heartbeat_ms) + " ago";
      return n.liveness + beat;
    }
    if (n.agent) return "agent joined";
    return "no agent yet";
  }
  function renderCard(n) {
    const el = card(n.id);
    el.dataset.stage = n.stage;
    el.dataset.ready = String(n.ready);
    el.querySelector(".stage").textContent = n.stage + (n.ready ? " (ready)" : "");
    field(el, "group", n.group);
    field(el, "liveness", liveness(n));
    field(el, "provider", n.provider);
    field(el, "lease", n.lease);
    field(el, "endpoint", n.endpoint);
    field(el, "gpu", n.gpu || "none");
    field(el, "price", n.usd_per_hour == null ? null : "$" + n.usd_per_hour.toFixed(2) + "/h");
    field(el, "uptime", n.lease ? age(n.lease_since_ms) : null);
    field(el, "in stage", age(n.stage_since_ms));
    field(el, "failure", n.failed_reason);
    el.querySelector('[data-f="failure"]').classList.toggle("reason", !!n.failed_reason);
    const kill = el.querySelector(".kill");
    kill.hidden = dash.readOnly || !dash.upRunning;
    kill.disabled = n.stage !== "Dormant";
    const remove = el.querySelector(".remove");
    remove.hidden = dash.readOnly || !dash.upRunning;
    remove.disabled = n.stage === "Destroying" || n.stage === "Destroyed";
    el.setAttribute("aria-label", n.id + ": " + n.stage + (n.ready ? ", ready" : "") +
      (n.failed_reason ? ", failed: " + n.failed_reason : "") + ". Enter opens the full log.");
  }
  // Per group: ready/desired, and +1 / -1 (the reconciler's desired count).
  function groupItem(name) {
    const ul = $("groups");
    let li = ul.querySelector('li[data-group="' + CSS.escape(name) + '"]');
    if (li) return li;
    li = document.createElement("li");
    li.dataset.group = name;
    li.innerHTML = '<span class="name"></span> <span class="count"></span> ' +
      '<button type="button" class="plus">+1</button><button type="button" class="minus">-1</button>';
    li.querySelector(".name").textContent = name;
    const path = "/api/groups/" + q(name) + "/scale";
    li.querySelector(".plus").addEventListener("click", () => {
      const g = dash.groups.find((x) => x.group === name) || { desired: 0 };
      control("Add a node to " + name + "? Its desired count goes from " + g.desired + " to " +
        (g.desired + 1) + "; the new node is rented and bootstrapped.",
        path, name + ": one node more asked for", { delta: 1 });
    });
    li.querySelector(".minus").addEventListener("click", () => {
      const g = dash.groups.find((x) => x.group === name) || { desired: 0 };
      control("Remove a node from " + name + "? Its desired count goes from " + g.desired + " to " +
        (g.desired - 1) + "; its highest-numbered node's lease is destroyed.",
        path, name + ": one node less asked for", { delta: -1 });
    });
    ul.append(li);
    return li;
  }
  function renderGroups() {
    const names = new Set(dash.groups.map((g) => g.group));
    for (const li of [...$("groups").children]) if (!names.has(li.dataset.group)) li.remove();
    const hidden = dash.readOnly || !dash.upRunning;
    for (const g of dash.groups) {
      const li = groupItem(g.group);
      li.dataset.full = String(g.ready >= g.desired);
      li.querySelector(".count").textContent = g.ready + "/" + g.desired;
      li.setAttribute("aria-label", g.group + ": " + g.ready + " of " + g.desired + " ready");
      const plus = li.querySelector(".plus"), minus = li.querySelector(".minus");
      plus.hidden = hidden; minus.hidden = hidden;
      minus.disabled = g.desired === 0;
      plus.setAttribute("aria-label", "Add a node to " + g.group + " (desired " + g.desired + " to " + (g.desired + 1) + ")");
      minus.setAttribute("aria-label", "Remove a node from " + g.group + " (desired " + g.desired + " to " + Math.max(0, g.desired - 1) + ")");
    }
  }
  // Tails are written at most every TAIL_MS, all at once: a burst of lines
  // (twenty nodes booting) costs one layout, not one per line, and leaves
  // the page free for the next event.
  const TAIL_MS = 200;
  const dirtyTails = new Set();
  let tailsDue = false;
  function renderTail(node) {
    dirtyTails.add(node);
    if (tailsDue) return;
    tailsDue = true;
    setTimeout(flushTails, TAIL_MS);
  }
  function flushTails() {
    if (!tailsDue) return;
    tailsDue = false;
    const pres = [];
    for (const node of dirtyTails) {
      const pre = card(node).querySelector(".tail");
      pre.textContent = (dash.logs.get(node) || []).join("\n");
      if (pre.pinned) pres.push(pre);
    }
    dirtyTails.clear();
    for (const pre of pres) pre.scrollTop = pre.scrollHeight;
  }
  dash.flushTails = flushTails;
  function addLog(l) {
    const last = dash.offsets.get(l.node) || 0;
    if (l.offset <= last) { dash.duplicates += 1; return; }
    dash.offsets.set(l.node, l.offset);
    const lines = dash.logs.get(l.node) || [];
    lines.push(l.line);
    if (lines.length > 200) lines.shift();
    dash.logs.set(l.node, lines);
  }

  // Pipeline.
  function bytes(n) {
    if (n == null) return "-";
    const units = ["B", "KiB", "MiB", "GiB"]; let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function renderPipeline() {
    const p = dash.pipeline;
    $("pipeline").hidden = !p;
    if (!p) return;
    $("stages").replaceChildren(...(p.stages || []).map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.stage = s.stage;
      tr.dataset.state = s.state;
      const cells = [s.stage, s.node, s.layers, bytes(s.fetched_bytes) + " / " + bytes(s.slice_bytes), s.state];
      for (const c of cells) { const td = document.createElement("td"); text(td, c); tr.append(td); }
      return tr;
    }));
    const sv = p.serving || {};
    const rows = [["active", sv.active == null ? "idle" : "request " + sv.active], ["queue", sv.queue],
      ["done", sv.requests_done], ["ttft", sv.ttft_ms == null ? null : sv.ttft_ms.toFixed(1) + " ms"],
      ["tokens/s", sv.tokens_per_s == null ? null : sv.tokens_per_s.toFixed(1)],
      ["repairs", sv.repairs == null ? null : sv.repairs + (sv.repairing ? " (repairing)" : "")]];
    $("serving").replaceChildren(...rows.map(([k, v]) => {
      const d = document.createElement("div"); d.dataset.k = k;
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); text(dd, v);
      d.append(dt, dd); return d;
    }));
    const can = !dash.readOnly && !!p.prompt_addr && dash.upRunning;
    $("prompt-send").disabled = !can;
    $("prompt-text").disabled = !can;
  }

  function renderAll() {
    $("run").textContent = dash.runId == null ? "no run" : "run " + dash.runId + (dash.readOnly ? " (read-only)" : "");
    renderGroups();
    for (const n of dash.nodes.values()) renderCard(n);
    for (const node of dash.logs.keys()) renderTail(node);
    flushTails();
    renderPipeline();
    renderConn();
    $("stop").hidden = dash.readOnly || !dash.upRunning;
  }

  // Controls: each asks first, then goes to the run; its effect arrives on
  // the stream like any other change.
  async function control(question, path, done, body) {
    if (!dash.confirm(question)) return;
    try {
      const init = { method: "POST" };
      if (body) { init.headers = { "content-type": "application/json" }; init.body = JSON.stringify(body); }
      const res = await fetch(api(path), init);
      $("notice").textContent = res.ok ? done : "refused: " + (await res.text()).trim();
    } catch (err) {
      $("notice").textContent = "failed: " + err;
    }
  }
  $("stop").addEventListener("click", () =>
    control("Stop the run? Every lease is torn down.", "/api/stop", "stopping: tearing down every lease"));
  function renderConn() {
    const c = $("conn");
    if (dash.connected === false) { c.dataset.state = "down"; c.textContent = "reconnecting"; }
    else if (!dash.upRunning) { c.dataset.state = "stopped"; c.textContent = "run stopped"; }
    else { c.dataset.state = "live"; c.textContent = "live"; }
  }
  // The fleet's rate, and what its leases cost so far: the server's figure
  // at its `server_ms`, moved on by the rate on the page's own clock.
  function cost(d) {
    if (d.fleet_usd_per_hour != null) {
      dash.rate = d.fleet_usd_per_hour;
      $("cost").textContent = "$" + dash.rate.toFixed(2) + "/h";
    }
    if (d.usd_accrued != null) { dash.accrued = { usd: d.usd_accrued, at: d.server_ms }; renderAccrued(); }
  }
  function renderAccrued() {
    const a = dash.accrued;
    if (!a) return;
    const running = dash.upRunning ? Math.max(0, Date.now() - a.at) : 0;
    const usd = a.usd + (dash.rate || 0) * running / 3600000;
    $("accrued").textContent = "$" + usd.toFixed(2) + " so far";
  }

  const handlers = {
    hello(d) { dash.hellos.push(d); },
    gap(d) {
      dash.gaps.push(d);
      $("notice").textContent = "resynced: " + d.reason + (d.missed ? " (" + d.missed + " events)" : "");
    },
    snapshot(d) {
      dash.readOnly = d.read_only; dash.upRunning = d.up_running; dash.runId = d.run_id;
      dash.groups = d.groups; dash.pipeline = d.pipeline;
      dash.nodes = new Map(d.nodes.map((n) => [n.id, n]));
      dash.logs = new Map(); dash.offsets = new Map();
      for (const [node, lines] of Object.entries(d.logs || {})) for (const l of lines) addLog(l);
      $("fleet").replaceChildren();
      cards.clear();
      cost(d);
      renderAll();
    },
    node(d) { dash.nodes.set(d.node.id, d.node); renderCard(d.node); cost(d); },
    groups(d) { dash.groups = d.groups; renderGroups(); cost(d); },
    pipeline(d) { dash.pipeline = d.pipeline; renderPipeline(); },
    log(d) { addLog(d); renderTail(d.node); },
    run(d) {
      dash.upRunning = d.up_running; renderConn(); renderPipeline(); renderGroups();
      for (const n of dash.nodes.values()) renderCard(n);
    },
  };

  // One stream per browser (a SharedWorker fans it out to every page), or
  // the page's own where that is missing: `feed.js`.
  function apply(kind, id, text) {
    const data = JSON.parse(text);
    if (id) dash.lastId = id;
    handlers[kind](data);
    dash.applied += 1;
    dash.counts[kind] = (dash.counts[kind] || 0) + 1;
    if (data.server_ms) {
      const ms = Date.now() - data.server_ms;
      dash.latencies.push(ms);
      if (dash.latencies.length > 10000) dash.latencies.shift();
      // A node's state change, now on screen (the benchmark's figure).
      if (kind === "node" && dash.transitions.length < 10000) dash.transitions.push(ms);
    }
  }
  const feed = window.droverFeed(token, Object.keys(handlers), apply, (up) => { dash.connected = up; renderConn(); });
  dash.feed = feed;
  // A reconnect that resumes after the last id applied.
  dash.reconnect = () => feed.reconnect();

  // The full log: what `drover logs NODE` prints, line for line.
  async function openLog(node) {
    const dialog = $("logview");
    $("logview-h").textContent = "Log of " + node;
    $("logtext").textContent = "loading";
    dialog.dataset.node = node;
    delete dialog.dataset.loaded;
    if (!dialog.open) dialog.showModal();
    const res = await fetch(api("/api/logs/" + q(node)));
    $("logtext").textContent = await res.text();
    dialog.dataset.loaded = "true";
    $("logtext").focus();
  }
  $("logview-close").addEventListener("click", () => $("logview").close());
  $("logview").addEventListener("close", () => {
    const back = document.querySelector('.card[data-node="' + CSS.escape($("logview").dataset.node || "") + '"]');
    if (back) back.focus();
  });

  // The prompt box: the answer streams in as the service sends it.
  $("prompt-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const out = $("answer");
    out.textContent = ""; out.dataset.state = "streaming";
    const max = parseInt($("prompt-max").value, 10);
    const body = JSON.stringify({ text: $("prompt-text").value, max_tokens: max > 0 ? max : null });
    try {
      const res = await fetch(api("/api/prompt"), { method: "POST", headers: { "content-type": "application/json" }, body });
      if (!res.ok) { out.textContent = await res.text(); out.dataset.state = "failed"; return; }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl); buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const msg = JSON.parse(line);
          if (msg.TextDelta) out.textContent += msg.TextDelta.text;
          if (msg.Done) out.dataset.state = "done";
          if (msg.Fault) { out.dataset.state = "failed"; out.textContent += "\n[fault: " + msg.Fault.reason + "]"; }
        }
      }
      if (out.dataset.state === "streaming") out.dataset.state = "done";
    } catch (err) {
      out.dataset.state = "failed"; out.textContent += "\n[" + err + "]";
    }
  });

  // Ages move on the page's own clock (nothing is fetched for them): once
  // a second, the age fields only.
  setInterval(() => {
    for (const n of dash.nodes.values()) {
      const el = cards.get(n.id);
      if (!el) continue;
      field(el, "liveness", liveness(n));
      field(el, "uptime", n.lease ? age(n.lease_since_ms) : null);
      field(el, "in stage", age(n.stage_since_ms));
    }
    renderAccrued();
  }, 1000);
})();
