// The dashboard: a client of the admin API. The token lives in this
// module's memory only. Every change sends the ETag it was read with; a 409
// shows the latest version and lets the operator re-decide.

let token = "";

const $ = (sel) => document.querySelector(sel);
const main = () => $("#main");

// el builds an element; strings become text nodes (never HTML).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function banner(msg, ok = false) {
  const b = $("#banner");
  b.textContent = msg;
  b.className = ok ? "ok" : "";
  b.hidden = !msg;
}

class APIError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

// api calls the admin API; body may be an object (JSON) or a Blob/File.
async function api(method, path, body, headers = {}) {
  const h = { Authorization: "Bearer " + token, ...headers };
  let payload;
  if (body instanceof Blob) {
    payload = body;
    h["Content-Type"] = h["Content-Type"] || "application/wasm";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    h["Content-Type"] = "application/json";
  }
  const res = await fetch(path, { method, headers: h, body: payload, cache: "no-store" });
  const etag = res.headers.get("ETag");
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new APIError(res.status, err.code || "http_" + res.status, err.message || res.statusText, err.details);
  }
  return { data, etag };
}

function showError(e) {
  if (e instanceof APIError) banner(`${e.code}: ${e.message}`);
  else banner(String(e));
}

function time(secs) {
  return secs ? new Date(secs * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z" : "—";
}

function bar(pct) {
  const p = Math.max(0, Math.min(100, pct || 0));
  const fill = el("span");
  fill.style.width = `${p}%`; // a CSSOM property: allowed by the page's CSP, unlike style attributes
  return el("span", { class: "bar", role: "img", "aria-label": `${p.toFixed(1)} percent used` }, fill);
}

function table(headers, rows) {
  return el("div", { class: "scroll" },
    el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows)));
}

function field(label, input) {
  return el("label", {}, label, input);
}

// conflictPanel shows the latest version after a 409 and offers to re-apply.
function conflictPanel(what, latest, reapply) {
  return el("div", { class: "conflict", role: "status" },
    el("p", {}, `This ${what} changed since you read it (stale_revision). Latest version:`),
    el("pre", {}, JSON.stringify(latest, null, 2)),
    el("button", { type: "button", onclick: reapply }, "Re-apply my change on the latest version"),
    " ",
    el("button", { type: "button", onclick: () => route() }, "Discard my change"));
}

// ------------------------------------------------------------ sign in

async function signIn(ev) {
  ev.preventDefault();
  token = $("#token").value.trim();
  $("#token").value = "";
  try {
    await api("GET", "/admin/v1/status");
  } catch (e) {
    token = "";
    showError(e);
    return;
  }
  banner("");
  $("#nav").hidden = false;
  if (!location.hash || location.hash === "#/") location.hash = "#/upstreams";
  else route();
}

function signOut() {
  token = "";
  $("#nav").hidden = true;
  location.hash = "";
  location.reload();
}

// ----------------------------------------------------------- upstreams

async function upstreamsPage() {
  const { data: ups } = await api("GET", "/admin/v1/upstreams");
  const rows = [];
  for (const u of ups) {
    let windows = "—";
    if (u.kind === "vendor_oauth") {
      try {
        const { data: o } = await api("GET", `/admin/v1/upstreams/${u.id}/limit-resets`);
        windows = o.observed
          ? el("div", {}, el("div", {}, "5h ", bar(o.five_hour && o.five_hour.utilization)),
            el("div", {}, "7d ", bar(o.seven_day && o.seven_day.utilization)),
            o.coupon.available ? el("button", { type: "button", onclick: () => claim(u) }, "Claim reset coupon") : el("span", { class: "hint" }, "no coupon"))
          : el("span", { class: "hint" }, "not observed yet");
      } catch (e) { windows = e.code; }
    }
    rows.push(el("tr", { "data-upstream": u.name },
      el("td", {}, u.name), el("td", {}, u.kind), el("td", {}, u.enabled ? "enabled" : "disabled"),
      el("td", {}, u.credential_mode || "none"),
      el("td", {}, u.warmup_enabled ? "on" : "off", el("br"), el("span", { class: "hint" }, time(u.status.last_warmup_at_unix_secs))),
      el("td", {}, windows),
      el("td", {},
        el("button", { type: "button", onclick: () => toggleUpstream(u) }, u.enabled ? "Disable" : "Enable"), " ",
        el("button", { type: "button", onclick: () => editUpstream(u.id) }, "Edit"), " ",
        u.kind === "vendor_oauth" ? el("button", { type: "button", onclick: () => connectOAuth(u) }, "Connect OAuth") : "", " ",
        el("button", { type: "button", class: "danger", onclick: () => deleteUpstream(u) }, "Delete"))));
  }
  const kind = el("select", { id: "up-kind", name: "kind" },
    el("option", { value: "vendor_api_key" }, "API key"), el("option", { value: "vendor_oauth" }, "OAuth subscription"));
  const form = el("form", { class: "inline", id: "upstream-create", onsubmit: createUpstream },
    field("Name", el("input", { id: "up-name", required: true })),
    field("Kind", kind),
    field("Base URL", el("input", { id: "up-url", type: "url", required: true, placeholder: "https://api.anthropic.com" })),
    field("API key (API-key upstreams)", el("input", { id: "up-key", type: "password", autocomplete: "off" })),
    el("button", { class: "primary", type: "submit" }, "Create upstream"));
  return [
    el("section", { "aria-labelledby": "h-ups" }, el("h2", { id: "h-ups" }, "Upstreams"),
      table(["Name", "Kind", "State", "Credential", "Warm-up / last", "Windows", "Actions"], rows)),
    el("section", { "aria-labelledby": "h-upc" }, el("h2", { id: "h-upc" }, "New upstream"), form),
    el("section", { id: "upstream-detail", hidden: true })];
}

async function createUpstream(ev) {
  ev.preventDefault();
  const body = { name: $("#up-name").value, kind: $("#up-kind").value, base_url: $("#up-url").value };
  if (body.kind === "vendor_api_key") body.api_key_value = $("#up-key").value;
  $("#up-key").value = "";
  try {
    await api("POST", "/admin/v1/upstreams", body);
    banner(`Upstream ${body.name} created.`, true);
    route();
  } catch (e) { showError(e); }
}

async function toggleUpstream(u) {
  try {
    await api("POST", `/admin/v1/upstreams/${u.id}/${u.enabled ? "disable" : "enable"}`, undefined, { "If-Match": `"${u.spec_revision}"` });
    route();
  } catch (e) { showError(e); }
}

async function deleteUpstream(u) {
  if (!confirm(`Delete upstream ${u.name}?`)) return;
  try {
    await api("DELETE", `/admin/v1/upstreams/${u.id}`, undefined, { "If-Match": `"${u.spec_revision}"` });
    route();
  } catch (e) { showError(e); }
}

async function editUpstream(id) {
  const { data: u, etag } = await api("GET", `/admin/v1/upstreams/${id}`);
  const panel = $("#upstream-detail");
  panel.hidden = false;
  const name = el("input", { id: "edit-name", value: u.name });
  const url = el("input", { id: "edit-url", value: u.base_url });
  const save = async (ev, useEtag) => {
    if (ev) ev.preventDefault();
    try {
      await api("PUT", `/admin/v1/upstreams/${id}`, { name: name.value, base_url: url.value }, { "If-Match": useEtag });
      banner(`Upstream ${name.value} saved.`, true);
      route();
    } catch (e) {
      if (e.code === "stale_revision") {
        const { data: latest, etag: fresh } = await api("GET", `/admin/v1/upstreams/${id}`);
        panel.append(conflictPanel("upstream", latest, () => save(null, fresh)));
      }
      showError(e);
    }
  };
  panel.replaceChildren(el("h2", {}, `Edit ${u.name}`),
    el("form", { class: "inline", id: "upstream-edit", onsubmit: (ev) => save(ev, etag) },
      field("Name", name), field("Base URL", url), el("button", { class: "primary", type: "submit" }, "Save")));
  name.focus();
}

async function connectOAuth(u) {
  const panel = $("#upstream-detail");
  panel.hidden = false;
  try {
    const { data: st } = await api("POST", `/admin/v1/upstreams/${u.id}/oauth/start`);
    const code = el("input", { id: "oauth-code", required: true, autocomplete: "off" });
    panel.replaceChildren(el("h2", {}, `Connect ${u.name}`),
      el("p", {}, "1. Open ", el("a", { href: st.authorization_url, target: "_blank", rel: "noopener noreferrer", id: "oauth-link" }, "the authorization page"),
        " and approve. 2. Paste the code it shows:"),
      el("form", { class: "inline", onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          const { data } = await api("POST", `/admin/v1/upstreams/${u.id}/oauth/complete`, { state: st.state, code: code.value.trim() });
          code.value = "";
          banner(`Connected: credential mode ${data.credential_mode}.`, true);
          route();
        } catch (e) { showError(e); }
      } }, field("Authorization code", code), el("button", { class: "primary", type: "submit" }, "Complete")));
  } catch (e) { showError(e); }
}

async function claim(u) {
  try {
    await api("POST", `/admin/v1/upstreams/${u.id}/limit-resets/claim`);
    banner("Reset coupon claimed.", true);
    route();
  } catch (e) { showError(e); }
}

// ---------------------------------------------------------- principals

async function principalsPage() {
  const { data: ps } = await api("GET", "/admin/v1/principals");
  const rows = ps.map((p) => el("tr", { "data-principal": p.name },
    el("td", {}, p.name), el("td", {}, p.enabled ? "enabled" : "disabled"), el("td", {}, (p.allowed_models || []).join(", ")),
    el("td", {}, (p.default_limits || []).map((l) => `${l.max} ${l.kind} / ${l.window_secs}s`).join(", ") || "none"),
    el("td", {}, p.cache_keepalive && p.cache_keepalive.enabled ? "on" : "off"),
    el("td", {},
      el("button", { type: "button", onclick: () => principalDetail(p.id) }, "Keys & chain"), " ",
      el("button", { type: "button", onclick: async () => {
        try { await api("POST", `/admin/v1/principals/${p.id}/${p.enabled ? "disable" : "enable"}`, undefined, { "If-Match": `"${p.revision}"` }); route(); } catch (e) { showError(e); }
      } }, p.enabled ? "Disable" : "Enable"))));
  const form = el("form", { class: "inline", id: "principal-create", onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: $("#pr-name").value, kind: "machine", allowed_models: $("#pr-models").value.split(",").map((s) => s.trim()).filter(Boolean) };
    if ($("#pr-ka").checked) body.cache_keepalive = { enabled: true };
    const rpm = $("#pr-rpm").value.trim();
    if (rpm) body.default_limits = [{ kind: "requests", window_secs: 60, max: Number(rpm) }];
    try { await api("POST", "/admin/v1/principals", body); banner(`Principal ${body.name} created.`, true); route(); } catch (e) { showError(e); }
  } },
  field("Name", el("input", { id: "pr-name", required: true })),
  field("Allowed models (comma separated; * or prefix*)", el("input", { id: "pr-models", value: "claude-*" })),
  field("Requests per minute (empty: no limit)", el("input", { id: "pr-rpm", type: "number", min: "1" })),
  el("label", {}, "Prompt-cache keep-alive", el("input", { id: "pr-ka", type: "checkbox" })),
  el("button", { class: "primary", type: "submit" }, "Create principal"));
  return [
    el("section", { "aria-labelledby": "h-prs" }, el("h2", { id: "h-prs" }, "Principals"),
      table(["Name", "State", "Allowed models", "Limits", "Keep-alive", "Actions"], rows)),
    el("section", { "aria-labelledby": "h-prc" }, el("h2", { id: "h-prc" }, "New principal"), form),
    el("section", { id: "principal-detail", hidden: true })];
}

async function principalDetail(id) {
  const panel = $("#principal-detail");
  panel.hidden = false;
  const [{ data: p }, { data: keys }, { data: chain }] = await Promise.all([
    api("GET", `/admin/v1/principals/${id}`), api("GET", `/admin/v1/principals/${id}/keys`), api("GET", `/admin/v1/principals/${id}/plugin-chain`)]);
  const keyRows = keys.map((k) => el("tr", {}, el("td", {}, k.name), el("td", {}, k.prefix + "…"), el("td", {}, k.revoked_at_unix_secs ? "revoked" : "active"),
    el("td", {}, k.revoked_at_unix_secs ? "" : el("button", { type: "button", class: "danger", onclick: async () => {
      try { await api("DELETE", `/admin/v1/principals/${id}/keys/${k.id}`); principalDetail(id); } catch (e) { showError(e); }
    } }, "Revoke"))));
  const issued = el("div", { id: "issued-key" });
  const issue = el("button", { type: "button", class: "primary", id: "issue-key", onclick: async () => {
    try {
      const { data } = await api("POST", `/admin/v1/principals/${id}/keys`, { name: "dashboard" });
      const secret = el("code", { class: "secret", id: "new-key" }, data.key);
      issued.replaceChildren(
        el("p", { role: "alert" }, "Copy this key now: it is shown exactly once and cannot be read again."),
        secret, " ",
        el("button", { type: "button", onclick: async () => { await navigator.clipboard.writeText(secret.textContent).catch(() => {}); } }, "Copy"), " ",
        el("button", { type: "button", id: "hide-key", onclick: () => { issued.replaceChildren(el("p", { class: "hint" }, "The key was hidden.")); principalDetail(id); } }, "I have stored it"));
    } catch (e) { showError(e); }
  } }, "Issue key");
  const entries = chain.entries;
  const chainRows = entries.map((c, i) => el("tr", {},
    el("td", {}, String(c.position)), el("td", {}, c.builtin || c.wasm_registry_id), el("td", {}, JSON.stringify(c.config)),
    el("td", {},
      el("button", { type: "button", "aria-label": "Move up", disabled: i === 0, onclick: () => move(i, -1) }, "↑"), " ",
      el("button", { type: "button", "aria-label": "Move down", disabled: i === entries.length - 1, onclick: () => move(i, 1) }, "↓"), " ",
      el("button", { type: "button", class: "danger", onclick: async () => {
        try { await api("DELETE", `/admin/v1/plugin-chain-entries/${c.id}`, undefined, { "If-Match": `"${c.revision}"` }); principalDetail(id); } catch (e) { showError(e); }
      } }, "Remove"))));
  async function move(i, d) {
    const order = entries.map((c) => ({ id: c.id, revision: c.revision }));
    const [x] = order.splice(i, 1);
    order.splice(i + d, 0, x);
    try { await api("POST", `/admin/v1/principals/${id}/plugin-chain/reorder`, { order }); principalDetail(id); } catch (e) { showError(e); }
  }
  let pluginSelect = el("span", { class: "hint" }, "Plugin registry not available on this server.");
  try {
    const { data: reg } = await api("GET", "/admin/v1/plugins/registry");
    const routers = reg.entries.filter((r) => r.slots.includes("router"));
    const sel = el("select", { id: "chain-plugin" }, routers.map((r) => el("option", { value: r.id }, `${r.name} ${r.version || ""}`)));
    const cfg = el("input", { id: "chain-config", value: "{}" });
    pluginSelect = el("form", { class: "inline", onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("POST", `/admin/v1/principals/${id}/plugin-chain`, { slot: "router", wasm_registry_id: sel.value, config: JSON.parse(cfg.value || "{}"), position: null });
        principalDetail(id);
      } catch (e) { showError(e); }
    } }, field("Router plugin", sel), field("Config (JSON)", cfg), el("button", { type: "submit" }, "Insert"));
  } catch (e) { if (e.code !== "not_found") showError(e); }
  panel.replaceChildren(el("h2", {}, `Principal ${p.name}`),
    el("h3", {}, "Keys"), issue, issued, table(["Name", "Prefix", "State", ""], keyRows),
    el("h3", {}, "Plugin chain"), table(["Position", "Plugin", "Config", "Actions"], chainRows), pluginSelect);
}

// ------------------------------------------------------------- plugins

async function pluginsPage() {
  let reg;
  try { ({ data: reg } = await api("GET", "/admin/v1/plugins/registry")); } catch (e) {
    if (e.code === "not_found") return [el("section", {}, el("h2", {}, "Plugins"), el("p", {}, "Plugins are not available on this server."))];
    throw e;
  }
  const rows = reg.entries.map((r) => el("tr", { "data-plugin": r.name },
    el("td", {}, r.name), el("td", {}, r.version || "—"), el("td", {}, el("code", {}, r.digest.slice(0, 19) + "…")), el("td", {}, r.slots.join(", ")),
    el("td", {}, String(r.refcount)),
    el("td", {}, el("button", { type: "button", class: "danger", onclick: () => deletePlugin(r) }, "Delete…"))));
  const file = el("input", { id: "plugin-file", type: "file", accept: ".wasm,application/wasm", required: true });
  const form = el("form", { class: "inline", id: "plugin-upload", onsubmit: async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ name: $("#plugin-name").value });
    if ($("#plugin-version").value) q.set("version", $("#plugin-version").value);
    try {
      await api("POST", "/admin/v1/plugins/wasm?" + q, file.files[0], { "Content-Type": "application/wasm" });
      banner("Plugin uploaded.", true);
      route();
    } catch (e) { showError(e); }
  } }, field("Module (.wasm)", file), field("Name", el("input", { id: "plugin-name", required: true })),
  field("Version", el("input", { id: "plugin-version" })), el("button", { class: "primary", type: "submit" }, "Upload"));
  return [
    el("section", { "aria-labelledby": "h-pl" }, el("h2", { id: "h-pl" }, "Plugin registry"), table(["Name", "Version", "Digest", "Slots", "Refcount", ""], rows)),
    el("section", {}, el("h2", {}, "Upload a plugin"), form),
    el("section", { id: "plugin-detail", hidden: true })];
}

async function deletePlugin(r) {
  const panel = $("#plugin-detail");
  panel.hidden = false;
  try {
    const { data: refs } = await api("GET", `/admin/v1/plugins/registry/${r.id}/references`);
    const list = refs.references.length
      ? el("ul", { id: "impact" }, refs.references.map((x) => el("li", {}, `${x.kind} ${x.id}${x.owner ? " (principal " + x.owner + ")" : ""}`)))
      : el("p", {}, "Nothing references it.");
    panel.replaceChildren(el("h2", {}, `Delete ${r.name}`),
      el("p", {}, "Deleting it also removes these references:"), list,
      el("button", { type: "button", class: "danger", id: "confirm-delete", onclick: async () => {
        try {
          await api("DELETE", `/admin/v1/plugins/registry/${r.id}?cascade=references`, undefined,
            { "If-Match": `"${r.revision}"`, "X-Reference-Fingerprint": refs.reference_fingerprint });
          banner(`Plugin ${r.name} deleted with ${refs.references.length} references.`, true);
          route();
        } catch (e) {
          if (e.code === "references_changed") banner("references_changed: the impact list changed; review it again.");
          else showError(e);
          if (e.code === "references_changed") deletePlugin(r);
        }
      } }, "Delete with these references"));
  } catch (e) { showError(e); }
}

// ----------------------------------------------------------- scheduler

async function schedulerPage() {
  const filter = new URLSearchParams(location.hash.split("?")[1] || "").get("job_type") || "";
  const [{ data: st }, { data: fl }] = await Promise.all([
    api("GET", "/admin/scheduler/status"),
    api("GET", "/admin/scheduler/failures" + (filter ? "?job_type=" + encodeURIComponent(filter) : ""))]);
  const recurring = st.recurring_jobs.map((j) => el("tr", {}, el("td", {}, j.job_type), el("td", {}, j.retry_class), el("td", {}, `${j.every_secs} s`), el("td", {}, time(j.next_run_at_unix_secs))));
  const failures = fl.failures.map((f) => el("tr", {}, el("td", {}, f.job_type), el("td", {}, f.idempotency_key), el("td", {}, f.state),
    el("td", {}, `${f.attempt}/${f.max_attempts}`), el("td", {}, f.last_error)));
  const types = el("select", { id: "job-filter", onchange: (ev) => { location.hash = "#/scheduler" + (ev.target.value ? "?job_type=" + encodeURIComponent(ev.target.value) : ""); } },
    el("option", { value: "" }, "all job types"), st.job_types.map((t) => el("option", { value: t.job_type, selected: t.job_type === filter }, t.job_type)));
  return [
    el("section", {}, el("h2", {}, "Recurring jobs"), table(["Job type", "Retry class", "Every", "Next run"], recurring),
      el("p", { class: "hint" }, "States: " + Object.entries(st.states).map(([k, v]) => `${k} ${v}`).join(", "))),
    el("section", {}, el("h2", {}, "Failures"), field("Filter", types), table(["Job type", "Key", "State", "Attempts", "Last error (redacted)"], failures))];
}

// ------------------------------------------------------------- traffic

async function trafficPage() {
  const [{ data: rollups }, { data: events }] = await Promise.all([
    api("GET", "/admin/v1/usage-rollups"), api("GET", "/admin/v1/request-events?limit=50")]);
  const byKey = new Map();
  for (const r of rollups) {
    const k = `${r.principal_id} → ${r.upstream_id || "(none)"}`;
    const v = byKey.get(k) || { requests: 0, tokens: 0, hours: new Map() };
    v.requests += r.requests;
    v.tokens += r.input_tokens + r.output_tokens;
    v.hours.set(r.bucket_start_unix_secs, (v.hours.get(r.bucket_start_unix_secs) || 0) + r.requests);
    byKey.set(k, v);
  }
  const charts = [...byKey.entries()].map(([k, v]) => {
    const hours = [...v.hours.entries()].sort((a, b) => a[0] - b[0]);
    const max = Math.max(1, ...hours.map((h) => h[1]));
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("viewBox", `0 0 ${Math.max(1, hours.length) * 24} 60`);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `${k}: ${v.requests} requests, ${v.tokens} tokens`);
    hours.forEach(([, n], i) => {
      const rect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
      const h = (n / max) * 50;
      rect.setAttribute("x", i * 24 + 2);
      rect.setAttribute("y", 52 - h);
      rect.setAttribute("width", 20);
      rect.setAttribute("height", h);
      svg.append(rect);
    });
    return el("tr", { class: "traffic-row" }, el("td", {}, k), el("td", {}, String(v.requests)), el("td", {}, String(v.tokens)), el("td", {}, svg));
  });
  const recent = events.map((e) => el("tr", {}, el("td", {}, time(e.at_unix_secs)), el("td", {}, e.principal_id), el("td", {}, e.upstream_id || "—"),
    el("td", {}, e.model), el("td", {}, String(e.status)), el("td", {}, String(e.input_tokens + e.output_tokens))));
  return [
    el("section", {}, el("h2", {}, "Requests and tokens per principal and upstream (hourly, last 24 h)"),
      charts.length ? table(["Principal → upstream", "Requests", "Tokens", "Requests per hour"], charts) : el("p", { class: "hint" }, "No rollups yet.")),
    el("section", {}, el("h2", {}, "Recent requests"), table(["At", "Principal", "Upstream", "Model", "Status", "Tokens"], recent))];
}

// -------------------------------------------------------------- router

const pages = { "#/upstreams": upstreamsPage, "#/principals": principalsPage, "#/plugins": pluginsPage, "#/scheduler": schedulerPage, "#/traffic": trafficPage };

async function route() {
  if (!token) return;
  const key = (location.hash || "#/upstreams").split("?")[0];
  const page = pages[key] || upstreamsPage;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === key) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    const content = await page();
    main().replaceChildren(...content);
    document.body.dataset.page = key.slice(2);
  } catch (e) {
    if (e.status === 401) { token = ""; location.reload(); return; }
    showError(e);
  }
}

$("#signin-form").addEventListener("submit", signIn);
$("#signout").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
