// The dashboard: a client of the admin API. The operator signs in either
// through the OIDC issuer (a server-side session: an HttpOnly cookie the
// page never sees, and a CSRF token sent with every change) or with an
// admin token, which lives in this module's memory and in this tab's
// sessionStorage (so a reload keeps the session; closing the tab or
// signing out ends it). Every change sends the ETag it was read with; a
// 409 shows the latest version and lets the operator re-decide. What the
// caller's role may not do is not offered (GET /admin/v1/me).

const TOKEN_KEY = "proxy-admin-token";
let token = "";
let csrf = ""; // set when signed in through the issuer
let me = null;

const can = (perm) => !!me && me.permissions.includes(perm);
const signedIn = () => !!token || !!csrf;

function keepToken(t) {
  token = t;
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: memory only */ }
}

function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

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
  const h = token ? { Authorization: "Bearer " + token, ...headers } : { ...headers };
  if (csrf && method !== "GET" && method !== "HEAD") h["X-CSRF-Token"] = csrf;
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
  const t = $("#token").value.trim();
  $("#token").value = "";
  await start(t);
}

// start validates a token (or the issuer's session) and opens the
// dashboard with what the role allows.
async function start(t) {
  token = t;
  try {
    ({ data: me } = await api("GET", "/admin/v1/me"));
  } catch (e) {
    keepToken("");
    showError(e);
    return;
  }
  if (t) keepToken(t);
  banner("");
  $("#who").textContent = `${me.email || me.token_name || me.subject} · ${me.role}`;
  document.body.dataset.role = me.role;
  let first = "";
  for (const a of document.querySelectorAll("nav a[data-perm]")) {
    a.hidden = !can(a.dataset.perm);
    if (!a.hidden && !first) first = a.getAttribute("href");
  }
  $("#nav").hidden = false;
  const si = $("#signin");
  if (si) si.hidden = true;
  if (!location.hash || location.hash === "#/" || !allowed(location.hash)) location.hash = first;
  else route();
}

async function signOut() {
  if (csrf) await api("POST", "/auth/logout").catch(() => {});
  keepToken("");
  $("#nav").hidden = true;
  location.hash = "";
  location.reload();
}

// allowed reports whether the role may open the page behind a link.
function allowed(hash) {
  const a = document.querySelector(`nav a[href="${hash.split("?")[0]}"]`);
  return !!a && can(a.dataset.perm);
}

// Controls that change something are not offered to a role that may not
// write: every button and form of a page except those marked data-read
// (filters, paging, navigation) is removed as the page is drawn.
function pruneWrites() {
  if (!me || can("write")) return;
  for (const c of main().querySelectorAll("form:not([data-read]), button:not([data-read])")) {
    if (!c.closest("[data-read]")) c.remove();
  }
}
new MutationObserver(pruneWrites).observe(document.querySelector("#main"), { childList: true, subtree: true });

// ----------------------------------------------------------- upstreams

// routing says why an upstream is out of routing (the state column shows
// a disabled one already); null while it is routed.
function routing(s) {
  if (!s || s.routable || s.unroutable_reason === "disabled") return null;
  const why = {
    refresh_refused: "out of routing: the provider refused the OAuth refresh grant; run the OAuth flow again",
    no_credential: "out of routing: no credential",
  }[s.unroutable_reason] || `out of routing: ${s.unroutable_reason}`;
  return el("div", { class: s.unroutable_reason === "refresh_refused" ? "bad" : "hint", "data-unroutable": s.unroutable_reason }, why);
}

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
      el("td", {}, u.name), el("td", {}, u.kind, cloudSummary(u)), el("td", {}, u.enabled ? "enabled" : "disabled", routing(u.status)),
      el("td", {}, u.credential_mode || "none"),
      el("td", {}, u.warmup_enabled ? "on" : "off", el("br"), el("span", { class: "hint" }, time(u.status.last_warmup_at_unix_secs))),
      el("td", {}, windows),
      el("td", {},
        el("button", { type: "button", onclick: () => toggleUpstream(u) }, u.enabled ? "Disable" : "Enable"), " ",
        el("button", { type: "button", onclick: () => editUpstream(u.id) }, "Edit"), " ",
        u.kind === "vendor_oauth" ? el("button", { type: "button", onclick: () => connectOAuth(u) }, "Connect OAuth") : "", " ",
        el("button", { type: "button", class: "danger", onclick: () => deleteUpstream(u) }, "Delete"))));
  }
  const kind = el("select", { id: "up-kind", name: "kind", onchange: () => showCloudFields($("#up-kind").value) },
    el("option", { value: "vendor_api_key" }, "API key"), el("option", { value: "vendor_oauth" }, "OAuth subscription"),
    el("option", { value: "bedrock" }, "AWS Bedrock"), el("option", { value: "vertex" }, "Google Vertex AI"));
  const form = el("form", { class: "inline", id: "upstream-create", onsubmit: createUpstream },
    field("Name", el("input", { id: "up-name", required: true })),
    field("Kind", kind),
    field("Base URL (cloud kinds: optional, the region's endpoint)", el("input", { id: "up-url", type: "url", placeholder: "https://api.anthropic.com" })),
    field("API key (API-key upstreams)", el("input", { id: "up-key", type: "password", autocomplete: "off" })),
    el("div", { id: "up-cloud", hidden: true },
      field("Region", el("input", { id: "up-region", placeholder: "us-east-1" })),
      el("div", { "data-cloud": "vertex" }, field("Project", el("input", { id: "up-project", placeholder: "my-gcp-project" }))),
      el("div", { "data-cloud": "bedrock" },
        field("AWS access key id", el("input", { id: "up-aws-id", autocomplete: "off" })),
        field("AWS secret access key", el("input", { id: "up-aws-secret", type: "password", autocomplete: "off" }))),
      el("div", { "data-cloud": "vertex" },
        field("Service account key (JSON)", el("textarea", { id: "up-sa", rows: 3, autocomplete: "off" }))),
      field("Model map (one alias=upstream id a line)", el("textarea", { id: "up-models", rows: 3, placeholder: "claude-sonnet-4-5=anthropic.claude-sonnet-4-5-20250929-v1:0" }))),
    el("button", { class: "primary", type: "submit" }, "Create upstream"));
  return [
    el("section", { "aria-labelledby": "h-ups" }, el("h2", { id: "h-ups" }, "Upstreams"),
      table(["Name", "Kind", "State", "Credential", "Warm-up / last", "Windows", "Actions"], rows)),
    el("section", { "aria-labelledby": "h-upc" }, el("h2", { id: "h-upc" }, "New upstream"), form),
    el("section", { id: "upstream-detail", hidden: true })];
}

// cloudSummary shows a cloud upstream's region, project and model map
// (the client's alias and the upstream's id for it).
function cloudSummary(u) {
  if (u.kind !== "bedrock" && u.kind !== "vertex") return "";
  const where = [u.region, u.project].filter(Boolean).join(" · ");
  const models = Object.entries(u.model_map || {}).sort(([a], [b]) => a.localeCompare(b))
    .map(([from, to]) => el("li", { "data-alias": from }, from, " → ", el("code", {}, to)));
  return el("div", { class: "hint", "data-cloud-summary": u.name }, where, models.length ? el("ul", {}, ...models) : el("div", {}, "no model map"));
}

function showCloudFields(kind) {
  const cloud = kind === "bedrock" || kind === "vertex";
  $("#up-cloud").hidden = !cloud;
  for (const d of document.querySelectorAll("#up-cloud [data-cloud]")) d.hidden = d.dataset.cloud !== kind;
}

// modelMap reads "alias=id" lines; blank lines are skipped.
function modelMap(text) {
  const m = {};
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i < 1) throw new Error(`model map: "${t}" is not alias=upstream id`);
    m[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return m;
}

async function createUpstream(ev) {
  ev.preventDefault();
  const body = { name: $("#up-name").value, kind: $("#up-kind").value };
  if ($("#up-url").value) body.base_url = $("#up-url").value;
  if (body.kind === "vendor_api_key") body.api_key_value = $("#up-key").value;
  try {
    if (body.kind === "bedrock" || body.kind === "vertex") {
      body.region = $("#up-region").value;
      body.model_map = modelMap($("#up-models").value);
      if (body.kind === "bedrock") {
        body.aws_access_key_id = $("#up-aws-id").value;
        body.aws_secret_access_key = $("#up-aws-secret").value;
      } else {
        body.project = $("#up-project").value;
        body.service_account_json = $("#up-sa").value;
      }
    }
  } catch (e) { showError(e); return; }
  for (const id of ["#up-key", "#up-aws-secret", "#up-sa"]) $(id).value = "";
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
  // A stored key goes only to the host it was given for: moving to another
  // host needs it again (credential_required otherwise).
  const key = el("input", { id: "edit-key", type: "password", autocomplete: "off", placeholder: "unchanged" });
  // Routing (docs/routing.md): the share of new work and the usage
  // thresholds, percent of the polled windows (0: none).
  const weight = el("input", { id: "edit-weight", type: "number", min: 0, max: 1000, step: 1, value: u.weight });
  const max5h = el("input", { id: "edit-max5h", type: "number", min: 0, max: 100, step: 1, value: u.max_utilization_5h });
  const max7d = el("input", { id: "edit-max7d", type: "number", min: 0, max: 100, step: 1, value: u.max_utilization_7d });
  // The cap on requests in flight per replica (0: none).
  const cap = el("input", { id: "edit-cap", type: "number", min: 0, max: 100000, step: 1, value: u.max_in_flight || 0 });
  const cloud = u.kind === "bedrock" || u.kind === "vertex";
  const models = el("textarea", { id: "edit-models", rows: 3 },
    Object.entries(u.model_map || {}).map(([a, b]) => `${a}=${b}`).join("\n"));
  const save = async (ev, useEtag) => {
    if (ev) ev.preventDefault();
    const body = { name: name.value, base_url: url.value, weight: Number(weight.value),
      max_utilization_5h: Number(max5h.value), max_utilization_7d: Number(max7d.value), max_in_flight: Number(cap.value) };
    if (key.value) body.api_key_value = key.value;
    key.value = "";
    if (cloud) {
      body.region = u.region;
      if (u.project) body.project = u.project;
      try { body.model_map = modelMap(models.value); } catch (e) { showError(e); return; }
    }
    try {
      await api("PUT", `/admin/v1/upstreams/${id}`, body, { "If-Match": useEtag });
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
      field("Name", name), field("Base URL", url),
      ...(u.kind === "vendor_api_key" ? [field("API key (needed to move to another host)", key)] : []),
      field("Weight (0: standby)", weight), field("Max 5-hour use % (0: none)", max5h), field("Max 7-day use % (0: none)", max7d),
      field("Max in flight per replica (0: none)", cap),
      ...(cloud ? [field("Model map (one alias=upstream id a line)", models)] : []),
      el("button", { class: "primary", type: "submit" }, "Save")));
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
    el("td", {}, [...(p.default_limits || []).map((l) => `${l.max} ${l.kind} / ${l.window_secs}s`),
      ...(p.max_in_flight ? [`at most ${p.max_in_flight} in flight (then queued)`] : [])].join(", ") || "none"),
    el("td", {}, p.cache_keepalive && p.cache_keepalive.enabled ? "on" : "off"),
    // Capture keeps this principal's prompts and answers (docs/capture.md):
    // marked, so no one turns it on unseen.
    el("td", { "data-capture": p.capture_exchanges ? "on" : "off" }, p.capture_exchanges ? el("strong", { class: "capture-on" }, "captured") : "off"),
    el("td", {},
      el("button", { type: "button", "data-read": true, onclick: () => principalDetail(p.id) }, "Keys & chain"), " ",
      el("button", { type: "button", onclick: async () => {
        try { await api("POST", `/admin/v1/principals/${p.id}/${p.enabled ? "disable" : "enable"}`, undefined, { "If-Match": `"${p.revision}"` }); route(); } catch (e) { showError(e); }
      } }, p.enabled ? "Disable" : "Enable"), " ",
      el("button", { type: "button", "data-capture-toggle": p.name, onclick: async () => {
        try { await api("PATCH", `/admin/v1/principals/${p.id}`, { capture_exchanges: !p.capture_exchanges }, { "If-Match": `"${p.revision}"` }); route(); } catch (e) { showError(e); }
      } }, p.capture_exchanges ? "Stop capturing" : "Capture exchanges"))));
  const form = el("form", { class: "inline", id: "principal-create", onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: $("#pr-name").value, kind: "machine", allowed_models: $("#pr-models").value.split(",").map((s) => s.trim()).filter(Boolean) };
    if ($("#pr-ka").checked) body.cache_keepalive = { enabled: true };
    if ($("#pr-capture").checked) body.capture_exchanges = true;
    const rpm = $("#pr-rpm").value.trim();
    if (rpm) body.default_limits = [{ kind: "requests", window_secs: 60, max: Number(rpm) }];
    const cap = $("#pr-cap").value.trim();
    if (cap) body.max_in_flight = Number(cap);
    try { await api("POST", "/admin/v1/principals", body); banner(`Principal ${body.name} created.`, true); route(); } catch (e) { showError(e); }
  } },
  field("Name", el("input", { id: "pr-name", required: true })),
  field("Allowed models (comma separated; * or prefix*)", el("input", { id: "pr-models", value: "claude-*" })),
  field("Requests per minute (empty: no limit)", el("input", { id: "pr-rpm", type: "number", min: "1" })),
  field("Max in flight, past it queued (empty: no cap)", el("input", { id: "pr-cap", type: "number", min: "0", max: "10000" })),
  el("label", {}, "Prompt-cache keep-alive", el("input", { id: "pr-ka", type: "checkbox" })),
  el("label", { title: "Keeps request and response bodies, sealed, for the capture retention; readable by admin, operator and auditor" },
    "Capture exchanges (bodies kept)", el("input", { id: "pr-capture", type: "checkbox" })),
  el("button", { class: "primary", type: "submit" }, "Create principal"));
  return [
    el("section", { "aria-labelledby": "h-prs" }, el("h2", { id: "h-prs" }, "Principals"),
      table(["Name", "State", "Allowed models", "Limits", "Keep-alive", "Capture", "Actions"], rows)),
    el("section", { "aria-labelledby": "h-prc" }, el("h2", { id: "h-prc" }, "New principal"), form),
    el("section", { id: "principal-detail", hidden: true })];
}

async function principalDetail(id) {
  const panel = $("#principal-detail");
  panel.hidden = false;
  const [{ data: p }, { data: keys }, { data: chain }] = await Promise.all([
    api("GET", `/admin/v1/principals/${id}`), api("GET", `/admin/v1/principals/${id}/keys`), api("GET", `/admin/v1/principals/${id}/plugin-chain`)]);
  // The key list re-renders on its own after an issue or a revoke, so a
  // new key is listed at once while its secret stays on screen.
  const keyList = el("div", { id: "key-list" });
  const renderKeys = (ks) => keyList.replaceChildren(table(["Name", "Prefix", "State", ""], ks.map((k) => el("tr", { "data-key": k.prefix },
    el("td", {}, k.name), el("td", {}, k.prefix + "…"), el("td", {}, k.revoked_at_unix_secs ? "revoked" : "active"),
    el("td", {}, k.revoked_at_unix_secs ? "" : el("button", { type: "button", class: "danger", onclick: async () => {
      try { await api("DELETE", `/admin/v1/principals/${id}/keys/${k.id}`); await refreshKeys(); } catch (e) { showError(e); }
    } }, "Revoke"))))));
  const refreshKeys = async () => renderKeys((await api("GET", `/admin/v1/principals/${id}/keys`)).data);
  renderKeys(keys);
  const issued = el("div", { id: "issued-key" });
  const issue = el("button", { type: "button", class: "primary", id: "issue-key", onclick: async () => {
    try {
      const { data } = await api("POST", `/admin/v1/principals/${id}/keys`, { name: "dashboard" });
      const secret = el("code", { class: "secret", id: "new-key" }, data.key);
      issued.replaceChildren(
        el("p", { role: "alert" }, "Copy this key now: it is shown exactly once and cannot be read again."),
        secret, " ",
        el("button", { type: "button", onclick: async () => { await navigator.clipboard.writeText(secret.textContent).catch(() => {}); } }, "Copy"), " ",
        el("button", { type: "button", id: "hide-key", onclick: () => { issued.replaceChildren(el("p", { class: "hint" }, "The key was hidden.")); } }, "I have stored it"));
      await refreshKeys();
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
    el("h3", {}, "Keys"), issue, issued, keyList,
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

// ------------------------------------------------------------ overview

function pct(x) { return x === null || x === undefined ? "—" : `${(x * 100).toFixed(1)} %`; }
function num(n) { return Number(n || 0).toLocaleString("en-US"); }
function ms(n) { return n === null || n === undefined ? "—" : `${num(n)} ms`; }

function stat(id, label, value, hint) {
  return el("div", { class: "stat", id }, el("div", { class: "stat-label" }, label), el("div", { class: "stat-value" }, value),
    hint ? el("div", { class: "hint" }, hint) : null);
}

// usd formats integer nano-dollars exactly (BigInt: no float rounding),
// with at least two decimals, as the API's cost_usd does.
function usd(nanos) {
  const n = BigInt(nanos || 0);
  const neg = n < 0n, a = neg ? -n : n;
  let frac = String(a % 1000000000n).padStart(9, "0").replace(/0+$/, "");
  if (frac.length < 2) frac = frac.padEnd(2, "0");
  return `${neg ? "-" : ""}$${(a / 1000000000n).toLocaleString("en-US")}.${frac}`;
}

// spend is a usage total's cost; requests the catalog did not price are
// named beside it, since their cost is unknown, not zero.
function spend(u) {
  return el("td", { class: "num spend" }, usd(u.cost_nanos),
    u.unpriced_requests ? el("div", { class: "hint" }, `+ ${num(u.unpriced_requests)} unpriced`) : null);
}

function usageRows(list, name) {
  return list.map((u) => el("tr", {}, el("td", {}, name(u)), el("td", { class: "num" }, num(u.requests)), el("td", { class: "num" }, num(u.errors)),
    el("td", { class: "num" }, num(u.input_tokens)), el("td", { class: "num" }, num(u.output_tokens)),
    el("td", { class: "num" }, num(u.cache_read_input_tokens)), el("td", { class: "num" }, num(u.cache_creation_input_tokens)), spend(u)));
}

const usageHeaders = (first) => [first, "Requests", "Errors", "Input tokens", "Output tokens", "Cache read", "Cache write", "Spend"];

function windows(l) {
  if (!l) return "—";
  if (!l.observed) return el("span", { class: "hint" }, "not observed yet");
  return el("div", {}, el("div", {}, "5h ", bar(l.five_hour && l.five_hour.utilization)),
    el("div", {}, "7d ", bar(l.seven_day && l.seven_day.utilization)),
    el("div", { class: "hint" }, l.coupon && l.coupon.available ? "reset coupon available" : "no coupon"));
}

// routingCell shows an upstream's routing state: its weight (0: standby),
// requests in flight, its cap (slots in use, queued), sessions bound, its
// usage thresholds (and whether the polled use is past one) and a 429/529
// cooldown.
function routingCell(u) {
  const limits = [u.max_utilization_5h ? `5h ≤ ${u.max_utilization_5h}%` : null, u.max_utilization_7d ? `7d ≤ ${u.max_utilization_7d}%` : null].filter(Boolean);
  return el("div", { class: "routing" }, el("div", {}, u.weight ? `weight ${u.weight}` : "standby (weight 0)"),
    el("div", { class: "hint" }, `${num(u.in_flight)} in flight, ${num(u.sessions_bound)} sessions`),
    u.max_in_flight ? el("div", { class: "hint cap" }, `cap ${u.max_in_flight}: ${num(u.slots_in_use)} in use, ${num(u.queued)} queued`) : null,
    limits.length ? el("div", { class: "hint thresholds" }, `thresholds ${limits.join(", ")}`) : null,
    u.past_threshold ? el("div", { class: "bad past-threshold" }, "past its usage threshold: new work goes elsewhere") : null,
    u.cooldown_until_unix_secs ? el("div", { class: "bad cooldown" }, `cooling down until ${time(u.cooldown_until_unix_secs)}`) : null);
}

// tracingNote says whether this replica exports traces (docs/tracing.md).
function tracingNote(t) {
  if (!t) return "";
  if (!t.enabled) return "Tracing: off.";
  return `Tracing: on, OTLP/${t.protocol} to ${t.endpoint}, ${+(t.sampler_ratio * 100).toFixed(2)}% of new traces sampled, traceparent ${t.propagate_traceparent ? "passed" : "not passed"} upstream.`;
}

async function overviewPage() {
  // Status only adds the tracing note: the page does without it.
  const [{ data: o }, st] = await Promise.all([api("GET", "/admin/v1/overview"), api("GET", "/admin/v1/status").catch(() => null)]);
  const lh = o.last_hour;
  const ups = o.upstreams.map((u) => el("tr", { "data-upstream": u.name },
    el("td", {}, u.name), el("td", {}, u.kind), el("td", {}, u.enabled ? "enabled" : "disabled", routing(u)), el("td", {}, u.credential_mode || "none"),
    el("td", {}, time(u.last_apply_at_unix_secs), u.last_apply_error ? el("div", { class: "bad" }, u.last_apply_error) : null),
    el("td", {}, u.warmup_enabled ? "on" : "off", el("br"), el("span", { class: "hint" }, time(u.last_warmup_at_unix_secs))),
    el("td", {}, windows(u.limits)), el("td", {}, routingCell(u))));
  const snap = o.snapshot ? `Configuration snapshot generation ${o.snapshot.generation}, applied ${time(o.snapshot.built_at_unix_secs)}.` : "";
  const today = o.today_by_model.reduce((a, u) => ({ cost_nanos: a.cost_nanos + BigInt(u.cost_nanos || 0), unpriced: a.unpriced + u.unpriced_requests,
    requests: a.requests + u.requests }), { cost_nanos: 0n, unpriced: 0, requests: 0 });
  return [
    el("section", { "aria-labelledby": "h-ov" }, el("h2", { id: "h-ov" }, "Last hour"),
      el("div", { class: "stats" },
        stat("stat-rpm", "Requests per minute", lh.requests_per_minute.toFixed(1), "last 5 minutes"),
        stat("stat-req", "Requests", num(lh.requests), "last 60 minutes"),
        stat("stat-err", "Error rate", pct(lh.error_rate), `${num(lh.errors)} answered 4xx/5xx`),
        stat("stat-p50", "Latency p50", ms(lh.latency_p50_ms), "whole request"),
        stat("stat-p95", "Latency p95", ms(lh.latency_p95_ms), lh.latency_sample ? `of the newest ${num(lh.latency_sample)} requests` : "no requests"),
        stat("stat-ttfb50", "Time to first byte p50", ms(lh.ttfb_p50_ms), "first byte of the answer"),
        stat("stat-ttfb95", "Time to first byte p95", ms(lh.ttfb_p95_ms), lh.ttfb_sample ? `of ${num(lh.ttfb_sample)} relayed answers` : "no relayed answers"))),
    el("section", { "aria-labelledby": "h-td" }, el("h2", { id: "h-td" }, "Today"),
      el("div", { class: "stats" },
        stat("stat-spend", "Spend today", usd(today.cost_nanos), today.unpriced ? `${num(today.unpriced)} requests unpriced` : "UTC day, priced with the catalog"),
        stat("stat-today-req", "Requests today", num(today.requests), "UTC day"))),
    el("section", { "aria-labelledby": "h-tm" }, el("h2", { id: "h-tm" }, `Today by model (UTC, since ${time(o.today_since_unix_secs)})`),
      o.today_by_model.length ? table(usageHeaders("Model"), usageRows(o.today_by_model, (u) => u.model)) : el("p", { class: "hint" }, "No requests today.")),
    el("section", { "aria-labelledby": "h-tp" }, el("h2", { id: "h-tp" }, "Today by principal"),
      o.today_by_principal.length ? table(usageHeaders("Principal"), usageRows(o.today_by_principal, (u) => u.principal_name)) : el("p", { class: "hint" }, "No requests today.")),
    el("section", { "aria-labelledby": "h-uh" }, el("h2", { id: "h-uh" }, "Upstream health"),
      table(["Name", "Kind", "State", "Credential", "Last apply", "Warm-up / last", "Usage windows", "Routing"], ups),
      el("p", { class: "hint" }, snap),
      el("p", { class: "hint", id: "tracing-note" }, tracingNote(st && st.data && st.data.tracing)))];
}

// ------------------------------------------------------------- traffic

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#2356c4", "#d9822b", "#1e7d3a", "#8e44ad", "#b3261e", "#0e8a8a", "#7a5c00", "#c2185b"];

function svgEl(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// niceMax picks the y axis's top: four equal steps of 1, 2 or 5 times a
// power of ten (at least 1), so every tick is a round whole number.
function niceMax(m) {
  const raw = Math.max(1, m / 4);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const f of [1, 2, 5, 10]) if (f * p >= raw) return 4 * f * p;
  return 40 * p;
}

// stackedChart draws one fixed-size chart: one bar per hour of the range,
// stacked by series, every series on the same y scale; the current hour
// is marked live.
function stackedChart(id, title, unit, t, metric) {
  const W = 960, H = 240, L = 64, R = 12, T = 12, B = 40;
  const n = (t.to_unix_secs - t.from_unix_secs) / t.bucket_secs;
  const totals = Array.from({ length: n }, (_, i) => t.series.reduce((a, s) => a + s[metric][i], 0));
  const max = niceMax(Math.max(0, ...totals));
  const pw = W - L - R, ph = H - T - B, bw = pw / n;
  const y = (v) => T + ph - (v / max) * ph;
  const svg = svgEl("svg", { class: "chart", id, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `${title}: ${totals.reduce((a, b) => a + b, 0)} ${unit} over ${n} hours` });
  for (let k = 0; k <= 4; k++) {
    const v = (max * k) / 4;
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
      svgEl("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end" }, num(Math.round(v))));
  }
  svg.append(svgEl("text", { x: 12, y: T + ph / 2, transform: `rotate(-90 12 ${T + ph / 2})`, "text-anchor": "middle", class: "axis-title" }, unit));
  for (let i = 0; i < n; i++) {
    let base = 0;
    const start = t.from_unix_secs + i * t.bucket_secs;
    t.series.forEach((s, si) => {
      const v = s[metric][i];
      if (!v) return;
      const r = svgEl("rect", { x: L + i * bw + 1, y: y(base + v), width: Math.max(1, bw - 2), height: y(base) - y(base + v), fill: PALETTE[si % PALETTE.length] },
        svgEl("title", {}, `${s.principal_name} → ${s.upstream_name || "(none)"}, ${time(start)}: ${v} ${unit}`));
      svg.append(r);
      base += v;
    });
    const hour = new Date(start * 1000).getUTCHours();
    if (i % 3 === 0 || i === n - 1) {
      svg.append(svgEl("text", { x: L + i * bw + bw / 2, y: H - B + 14, "text-anchor": "middle" }, `${String(hour).padStart(2, "0")}:00`));
    }
  }
  const live = L + (n - 1) * bw;
  svg.append(svgEl("rect", { x: live, y: T, width: bw, height: ph, class: "live" }),
    svgEl("text", { x: live + bw / 2, y: T + 10, "text-anchor": "middle", class: "live-label" }, "live"),
    svgEl("line", { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: "axis" }),
    svgEl("text", { x: L + pw / 2, y: H - 6, "text-anchor": "middle", class: "axis-title" }, "hour (UTC)"));
  return el("figure", { class: "chart-box" }, el("figcaption", {}, title), el("div", { class: "scroll" }, svg));
}

async function trafficPage() {
  const { data: t } = await api("GET", "/admin/v1/traffic?hours=24");
  const legend = el("ul", { class: "legend", id: "traffic-legend" }, t.series.map((s, i) => {
    const sw = svgEl("svg", { width: 12, height: 12, "aria-hidden": "true" }, svgEl("rect", { width: 12, height: 12, fill: PALETTE[i % PALETTE.length] }));
    return el("li", {}, sw, ` ${s.principal_name} → ${s.upstream_name || "(no upstream)"}`);
  }));
  const sum = (a) => a.reduce((x, y) => x + y, 0);
  const rows = t.series.map((s) => el("tr", { class: "traffic-row" }, el("td", {}, s.principal_name), el("td", {}, s.upstream_name || "—"),
    el("td", { class: "num" }, num(sum(s.requests))), el("td", { class: "num" }, num(sum(s.errors))), el("td", { class: "num" }, num(sum(s.tokens))),
    el("td", { class: "num spend" }, usd((s.cost_nanos || []).reduce((x, y) => x + BigInt(y), 0n)))));
  const body = t.series.length
    ? [legend, stackedChart("chart-requests", "Requests per hour", "requests", t, "requests"),
      stackedChart("chart-tokens", "Tokens per hour (input + output)", "tokens", t, "tokens"),
      table(["Principal", "Upstream", "Requests", "Errors", "Tokens", "Spend"], rows)]
    : [el("p", { class: "hint" }, "No requests in the last 24 hours.")];
  return [
    el("section", { "aria-labelledby": "h-tr" }, el("h2", { id: "h-tr" }, "Traffic per principal and upstream, last 24 hours"),
      el("p", { class: "hint" }, `Hours before ${time(t.live_from_unix_secs)} come from the hourly rollups; the hours since are counted from the request events when the page loads.`),
      ...body)];
}

// ------------------------------------------------------------ requests

// The request log's filters live in the page address (#/requests?…), so a
// reload or a shared link shows the same search; the cursors of the pages
// already seen are kept for "Newer".
let logCursors = [];

function localInput(secs) {
  if (!secs) return "";
  const d = new Date(secs * 1000);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

async function requestsPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const cursor = params.get("cursor") || "";
  if (!cursor) logCursors = [];
  // An auditor reads the log but not the configuration: the principal
  // filter then offers no names.
  const [{ data: ps }, { data: page }] = await Promise.all([
    can("read") ? api("GET", "/admin/v1/principals") : Promise.resolve({ data: [] }), api("GET", "/admin/v1/request-log?" + params)]);
  const principal = el("select", { id: "log-principal", name: "principal" }, el("option", { value: "" }, "any principal"),
    ps.map((p) => el("option", { value: p.id, selected: p.id === params.get("principal") }, p.name)));
  const status = el("select", { id: "log-status", name: "status" }, [["", "any status"], ["2xx", "2xx"], ["4xx", "4xx"], ["5xx", "5xx"], ["error", "errors (≥ 400)"], ["429", "429"]]
    .map(([v, l]) => el("option", { value: v, selected: v === (params.get("status") || "") }, l)));
  const model = el("input", { id: "log-model", name: "model", value: params.get("model") || "", placeholder: "claude-sonnet-4-5" });
  const since = el("input", { id: "log-since", type: "datetime-local", value: localInput(Number(params.get("since_unix_secs"))) });
  const until = el("input", { id: "log-until", type: "datetime-local", value: localInput(Number(params.get("until_unix_secs"))) });
  const limit = el("select", { id: "log-limit" }, ["25", "50", "100", "200"].map((n) => el("option", { value: n, selected: n === (params.get("limit") || "50") }, n)));
  const go = (extra) => {
    const q = new URLSearchParams();
    if (principal.value) q.set("principal", principal.value);
    if (model.value.trim()) q.set("model", model.value.trim());
    if (status.value) q.set("status", status.value);
    if (since.value) q.set("since_unix_secs", String(Math.floor(new Date(since.value).getTime() / 1000)));
    if (until.value) q.set("until_unix_secs", String(Math.floor(new Date(until.value).getTime() / 1000)));
    if (limit.value !== "50") q.set("limit", limit.value);
    for (const [k, v] of Object.entries(extra || {})) if (v) q.set(k, v);
    location.hash = "#/requests" + (q.toString() ? "?" + q : "");
  };
  const form = el("form", { class: "inline", id: "log-filter", "data-read": true, onsubmit: (ev) => { ev.preventDefault(); logCursors = []; go(); } },
    field("Principal", principal), field("Model", model), field("Status", status), field("From (local time)", since), field("Until (local time)", until),
    field("Per page", limit), el("button", { class: "primary", type: "submit" }, "Search"));
  const rows = page.events.map((e) => el("tr", { "data-event": e.id, class: e.status >= 400 ? "bad-row" : null },
    el("td", {}, time(e.at_unix_secs)), el("td", {}, e.principal_name), el("td", {}, e.upstream_name || "—"), el("td", {}, e.model),
    el("td", {}, String(e.status), e.error_type ? el("div", { class: "hint" }, e.error_type) : null),
    // The mode says whether it streamed and, for a client of the OpenAI
    // dialect, that it spoke Chat Completions.
    el("td", { "data-dialect": e.dialect || "" }, e.stream ? "stream" : "—", e.dialect === "openai" ? el("div", { class: "hint" }, "OpenAI") : null),
    el("td", { class: "num" }, num(e.input_tokens)), el("td", { class: "num" }, num(e.output_tokens)),
    el("td", { class: "num" }, num(e.cache_read_input_tokens)), el("td", { class: "num" }, ms(e.ttfb_ms)), el("td", { class: "num" }, ms(e.duration_ms)),
    // A captured exchange is marked for everyone who reads the log; only
    // a role holding capture can open its bodies. Cost stays the last
    // column.
    el("td", {}, !e.captured ? "" : can("capture")
      ? el("button", { type: "button", class: "captured", "data-read": true, "data-exchange": e.id, onclick: () => openExchange(e.id) }, "captured")
      : el("span", { class: "captured hint", title: "The bodies of this request were captured; your role may not read them." }, "captured")),
    el("td", { class: "num", title: e.price_version ? `priced with catalog ${e.price_version}` : "not priced" }, e.cost_usd === null ? "—" : "$" + e.cost_usd)));
  const pager = el("div", { class: "row pager" },
    el("button", { type: "button", id: "log-newer", "data-read": true, disabled: !cursor, onclick: () => { logCursors.pop(); go({ cursor: logCursors[logCursors.length - 1] }); } }, "← Newer"),
    el("button", { type: "button", id: "log-older", "data-read": true, disabled: !page.next_cursor, onclick: () => { logCursors.push(page.next_cursor); go({ cursor: page.next_cursor }); } }, "Older →"),
    el("span", { class: "hint" }, `${page.events.length} requests on this page, newest first`));
  return [
    el("section", { "aria-labelledby": "h-rl" }, el("h2", { id: "h-rl" }, "Request log"), form),
    el("section", {}, page.events.length ? table(["At (UTC)", "Principal", "Upstream", "Model", "Status", "Mode", "Input", "Output", "Cache read", "First byte", "Duration", "Bodies", "Cost"], rows)
      : el("p", { class: "hint", id: "log-empty" }, "No request matches."), pager),
    el("section", { id: "exchange", hidden: true, "aria-labelledby": "h-ex" })];
}

// openExchange shows a captured exchange's bodies; the server audits the
// read. The bodies are shown as text, never as HTML.
async function openExchange(id) {
  const panel = $("#exchange");
  try {
    const { data: x } = await api("GET", `/admin/v1/request-events/${encodeURIComponent(id)}/exchange`);
    panel.replaceChildren(el("h2", { id: "h-ex" }, `Captured exchange ${x.event_id}`),
      ...(x.truncated ? [el("p", { class: "hint", id: "exchange-truncated" }, "A body was longer than the capture cap and is cut short.")] : []),
      el("h3", {}, "Request as received"), el("pre", { class: "body", id: "exchange-request" }, x.request),
      el("h3", {}, "Response as sent"), el("pre", { class: "body", id: "exchange-response" }, x.response),
      el("button", { type: "button", "data-read": true, onclick: () => { panel.hidden = true; panel.replaceChildren(); } }, "Close"));
    panel.hidden = false;
    panel.scrollIntoView();
  } catch (e) { showError(e); }
}

// --------------------------------------------------------------- audit

let auditCursors = [];

async function auditPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const q = new URLSearchParams({ limit: "50" });
  for (const k of ["actor_kind", "resource_kind", "actor", "cursor"]) if (params.get(k)) q.set(k, params.get(k));
  const { data: page } = await api("GET", "/admin/v1/audit?" + q);
  const go = (extra = {}) => {
    const n = new URLSearchParams();
    for (const [k, v] of Object.entries({ actor_kind: kind.value, resource_kind: res.value.trim(), actor: who.value.trim(), ...extra })) if (v) n.set(k, v);
    location.hash = "#/audit?" + n;
  };
  const kind = el("select", { id: "audit-kind" }, [["", "any credential"], ["oidc", "signed in (OIDC)"], ["token", "scoped token"], ["break_glass", "break-glass token"], ["cli", "command line"]]
    .map(([v, l]) => el("option", { value: v, selected: v === (params.get("actor_kind") || "") }, l)));
  const res = el("input", { id: "audit-resource", value: params.get("resource_kind") || "", placeholder: "upstream, principal, key, …" });
  const who = el("input", { id: "audit-actor", value: params.get("actor") || "", placeholder: "subject" });
  const form = el("form", { class: "inline", id: "audit-filter", "data-read": true, onsubmit: (ev) => { ev.preventDefault(); auditCursors = []; go(); } },
    field("Credential", kind), field("Resource", res), field("Who", who), el("button", { class: "primary", type: "submit", "data-read": true }, "Search"));
  const doc = (label, v) => v === null || v === undefined ? "—" : el("details", {}, el("summary", {}, label), el("pre", {}, JSON.stringify(v, null, 2)));
  const rows = page.entries.map((e) => el("tr", { "data-audit": e.id },
    el("td", {}, time(e.at_unix_secs)),
    el("td", {}, e.actor.kind || "—"),
    el("td", {}, e.actor.token_name ? `${e.actor.token_name} (token)` : e.actor.subject, e.actor.issuer ? el("span", { class: "hint" }, ` ${e.actor.issuer}`) : ""),
    el("td", {}, e.action), el("td", {}, `${e.resource_kind} ${e.resource_id}`), el("td", {}, e.actor.remote || "—"),
    el("td", {}, doc("before", e.before), doc("after", e.after))));
  const cursor = params.get("cursor");
  const pager = el("p", { class: "pager" },
    el("button", { type: "button", id: "audit-newer", "data-read": true, disabled: !cursor, onclick: () => { auditCursors.pop(); go({ cursor: auditCursors[auditCursors.length - 1] }); } }, "← Newer"), " ",
    el("button", { type: "button", id: "audit-older", "data-read": true, disabled: !page.next_cursor, onclick: () => { auditCursors.push(page.next_cursor); go({ cursor: page.next_cursor }); } }, "Older →"));
  return [
    el("section", { "aria-labelledby": "h-audit" }, el("h2", { id: "h-audit" }, "Audit trail"), form),
    el("section", {}, page.entries.length ? table(["At (UTC)", "Credential", "Who", "Action", "Resource", "From", "Change"], rows)
      : el("p", { class: "hint", id: "audit-empty" }, "No change matches."), pager)];
}

// -------------------------------------------------------- admin tokens

// Scoped admin tokens (admins only): the plaintext is in the answer to the
// creation and nowhere else, so it is drawn once, outside the list, and
// gone when the operator hides it or leaves the page.
const TOKEN_ROLES = ["viewer", "operator", "auditor", "admin"];
const TOKEN_LIVES = [["86400", "1 day"], ["604800", "7 days"], ["2592000", "30 days"], ["7776000", "90 days"], ["31536000", "365 days"]];

function tokenState(t) {
  if (t.revoked_at_unix_secs) return `revoked ${time(t.revoked_at_unix_secs)}`;
  return t.expires_at_unix_secs * 1000 <= Date.now() ? "expired" : "active";
}

async function adminTokensPage() {
  const list = el("div", { id: "admin-token-list" });
  const confirmPanel = el("div", { id: "admin-token-revoke", hidden: true });
  const refresh = async () => {
    const { data } = await api("GET", "/admin/v1/admin-tokens");
    list.replaceChildren(data.tokens.length ? table(["Name", "Role", "Prefix", "Expires (UTC)", "Created by", "Created (UTC)", "State", ""],
      data.tokens.map((t) => el("tr", { "data-admin-token": t.name },
        el("td", {}, t.name), el("td", {}, t.role), el("td", {}, el("code", {}, t.prefix + "…")), el("td", {}, time(t.expires_at_unix_secs)),
        el("td", {}, t.created_by), el("td", {}, time(t.created_at_unix_secs)), el("td", {}, tokenState(t)),
        el("td", {}, t.revoked_at_unix_secs ? "" : el("button", { type: "button", class: "danger", onclick: () => askRevoke(t) }, "Revoke…")))))
      : el("p", { class: "hint", id: "admin-token-empty" }, "No scoped token yet."));
  };
  // Revoking asks first: whatever uses the token is refused from its next request on.
  const askRevoke = (t) => {
    confirmPanel.hidden = false;
    confirmPanel.replaceChildren(el("p", { role: "alert" }, `Revoke ${t.name} (${t.role}, ${t.prefix}…)? Anything using it is refused from its next request on; this cannot be undone.`),
      el("button", { type: "button", class: "danger", id: "confirm-revoke", onclick: async () => {
        try {
          await api("DELETE", `/admin/v1/admin-tokens/${t.id}`);
          confirmPanel.hidden = true;
          confirmPanel.replaceChildren();
          banner(`Token ${t.name} revoked.`, true);
          await refresh();
        } catch (e) { showError(e); }
      } }, "Revoke the token"), " ",
      el("button", { type: "button", id: "cancel-revoke", onclick: () => { confirmPanel.hidden = true; confirmPanel.replaceChildren(); } }, "Cancel"));
  };
  const issued = el("div", { id: "issued-token" });
  const name = el("input", { id: "at-name", required: true, autocomplete: "off" });
  const role = el("select", { id: "at-role" }, TOKEN_ROLES.map((r) => el("option", { value: r }, r)));
  const life = el("select", { id: "at-expiry" }, TOKEN_LIVES.map(([v, l]) => el("option", { value: v, selected: v === "2592000" }, l)));
  const form = el("form", { class: "inline", id: "admin-token-create", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const { data } = await api("POST", "/admin/v1/admin-tokens", { name: name.value.trim(), role: role.value, expires_in_secs: Number(life.value) });
      name.value = "";
      const secret = el("code", { class: "secret", id: "new-token" }, data.token);
      issued.replaceChildren(
        el("p", { role: "alert" }, `Copy the token for ${data.name} (${data.role}) now: it is shown exactly once and cannot be read again.`),
        secret, " ",
        el("button", { type: "button", onclick: async () => { await navigator.clipboard.writeText(secret.textContent).catch(() => {}); } }, "Copy"), " ",
        el("button", { type: "button", id: "hide-token", onclick: () => { issued.replaceChildren(el("p", { class: "hint" }, "The token was hidden.")); } }, "I have stored it"));
      await refresh();
    } catch (e) { showError(e); }
  } }, field("Name", name), field("Role", role), field("Expires in", life), el("button", { class: "primary", type: "submit" }, "Create token"));
  await refresh();
  return [
    el("section", { "aria-labelledby": "h-at" }, el("h2", { id: "h-at" }, "Scoped admin tokens"),
      el("p", { class: "hint" }, "Bearer tokens for automation, each with one role and an expiry; a token is shown once, when it is created, and never again."),
      list, confirmPanel),
    el("section", { "aria-labelledby": "h-atc" }, el("h2", { id: "h-atc" }, "New token"), form, issued)];
}

// -------------------------------------------------------------- webhooks

// Alert webhooks (admins and operators: a receiver's URL may carry its own
// token). The secret is write-only: the form sends it when typed and the
// page never shows one. Each webhook's last deliveries come with it, dead
// letters marked; the alerts firing now head the page.
async function webhooksPage() {
  const firing = el("div", { id: "alerts-firing" });
  const list = el("div", { id: "webhook-list" });
  const deliveries = el("div", { id: "webhook-deliveries" });
  const { data: fired } = await api("GET", "/admin/v1/alerts");
  firing.replaceChildren(fired.alerts.length ? table(["Alert", "Rule", "Subject", "Episode", "Since (UTC)"],
    fired.alerts.map((a) => el("tr", { "data-alert": a.key }, el("td", {}, a.condition), el("td", {}, a.rule), el("td", {}, el("code", {}, a.subject)),
      el("td", { class: "num" }, a.episode), el("td", {}, time(a.since_unix_secs)))))
    : el("p", { class: "hint", id: "alerts-none" }, "No alert fires."));
  let editing = null; // the webhook the form edits, or null for a new one
  const name = el("input", { id: "wh-name", required: true, autocomplete: "off" });
  const url = el("input", { id: "wh-url", required: true, type: "url", autocomplete: "off" });
  const secret = el("input", { id: "wh-secret", type: "password", autocomplete: "new-password", minlength: 16, maxlength: 256 });
  const enabled = el("input", { id: "wh-enabled", type: "checkbox", checked: true });
  const conds = el("fieldset", { id: "wh-conditions" }, el("legend", {}, "Conditions (none ticked: all)"));
  const showDeliveries = async (w) => {
    const { data } = await api("GET", `/admin/v1/webhooks/${w.id}/deliveries`);
    deliveries.replaceChildren(el("h3", {}, `Last deliveries to ${w.name}`), data.deliveries.length
      ? table(["Delivery", "State", "Attempts", "Scheduled (UTC)", ""], data.deliveries.map((d) => el("tr", { "data-delivery": d.key, class: d.dead_letter ? "dead" : "" },
        el("td", {}, el("code", {}, d.key)), el("td", {}, d.state), el("td", { class: "num" }, `${d.attempt}/${d.max_attempts}`),
        el("td", {}, time(d.scheduled_at_unix_secs)), el("td", {}, d.dead_letter ? "dead letter (see Scheduler → failures)" : ""))))
      : el("p", { class: "hint" }, "Nothing delivered yet."));
  };
  const edit = (w) => {
    editing = w;
    name.value = w ? w.name : "";
    url.value = w ? w.url : "";
    secret.value = "";
    secret.required = !w;
    enabled.checked = w ? w.enabled : true;
    for (const c of conds.querySelectorAll("input")) c.checked = !!w && w.conditions.includes(c.value);
    submit.textContent = w ? `Save ${w.name}` : "Create webhook";
  };
  const refresh = async () => {
    const { data } = await api("GET", "/admin/v1/webhooks");
    if (!conds.querySelector("input")) {
      conds.append(...data.conditions.map((c) => el("label", { class: "check" }, el("input", { type: "checkbox", value: c, "data-condition": c }), c)));
    }
    list.replaceChildren(data.webhooks.length ? table(["Name", "URL", "Conditions", "Enabled", "Updated (UTC)", ""],
      data.webhooks.map((w) => el("tr", { "data-webhook": w.name },
        el("td", {}, w.name), el("td", {}, el("code", {}, w.url)), el("td", {}, w.conditions.length ? w.conditions.join(", ") : "all"),
        el("td", {}, w.enabled ? "yes" : "no"), el("td", {}, time(w.updated_at_unix_secs)),
        el("td", {},
          el("button", { type: "button", "data-read": true, onclick: () => showDeliveries(w).catch(showError) }, "Deliveries"), " ",
          el("button", { type: "button", onclick: () => edit(w) }, "Edit"), " ",
          el("button", { type: "button", disabled: !w.enabled, onclick: async () => {
            try {
              await api("POST", `/admin/v1/webhooks/${w.id}/test`);
              banner(`A test event is on its way to ${w.name}.`, true);
              await showDeliveries(w);
            } catch (e) { showError(e); }
          } }, "Send test"), " ",
          el("button", { type: "button", class: "danger", onclick: async () => {
            if (!confirm(`Delete webhook ${w.name}? Deliveries not yet made are dropped.`)) return;
            try {
              await api("DELETE", `/admin/v1/webhooks/${w.id}`, undefined, { "If-Match": `"${w.revision}"` });
              banner(`Webhook ${w.name} deleted.`, true);
              await refresh();
            } catch (e) { showError(e); }
          } }, "Delete")))))
      : el("p", { class: "hint", id: "webhook-empty" }, "No webhook yet."));
  };
  const submit = el("button", { class: "primary", type: "submit" }, "Create webhook");
  const form = el("form", { id: "webhook-form", onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: name.value.trim(), url: url.value.trim(), enabled: enabled.checked,
      conditions: [...conds.querySelectorAll("input:checked")].map((c) => c.value) };
    if (secret.value) body.secret = secret.value;
    try {
      if (editing) await api("PUT", `/admin/v1/webhooks/${editing.id}`, body, { "If-Match": `"${editing.revision}"` });
      else await api("POST", "/admin/v1/webhooks", body);
      banner(`Webhook ${body.name} saved.`, true);
      edit(null);
      await refresh();
    } catch (e) { showError(e); }
  } }, field("Name", name), field("URL", url), field("Secret (16–256 characters; leave empty to keep the stored one)", secret),
    field("Enabled", enabled), conds, submit, " ", el("button", { type: "button", onclick: () => edit(null) }, "New"));
  await refresh();
  return [
    el("section", { "aria-labelledby": "h-alerts" }, el("h2", { id: "h-alerts" }, "Alerts firing"), firing),
    el("section", { "aria-labelledby": "h-wh" }, el("h2", { id: "h-wh" }, "Alert webhooks"),
      el("p", { class: "hint" }, "Each condition is sent once when it starts firing and once when it resolves, signed with the webhook's secret (Pillar-Signature) and retried by the scheduler; a delivery out of attempts is a dead letter."),
      list, deliveries),
    el("section", { "aria-labelledby": "h-whf" }, el("h2", { id: "h-whf" }, "New or edited webhook"), form)];
}

// -------------------------------------------------------------- router

const pages = { "#/overview": overviewPage, "#/upstreams": upstreamsPage, "#/principals": principalsPage, "#/plugins": pluginsPage,
  "#/scheduler": schedulerPage, "#/traffic": trafficPage, "#/requests": requestsPage, "#/audit": auditPage,
  "#/tokens": adminTokensPage, "#/webhooks": webhooksPage };

async function route() {
  if (!signedIn() || !me) return;
  let key = (location.hash || "#/overview").split("?")[0];
  if (!pages[key] || !allowed(key)) {
    main().replaceChildren(el("p", { class: "hint", id: "not-offered" }, "This page is not available to your role."));
    return;
  }
  const page = pages[key];
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === key) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    const content = await page();
    main().replaceChildren(...content);
    document.body.dataset.page = key.slice(2);
  } catch (e) {
    if (e.status === 401) { keepToken(""); csrf = ""; location.reload(); return; }
    showError(e);
  }
}

$("#signin-form").addEventListener("submit", signIn);
$("#signout").addEventListener("click", signOut);
// Moving to another page clears the last page's message.
window.addEventListener("hashchange", () => { banner(""); route(); });

// boot resumes an issuer session or a stored token, and offers the
// issuer's sign-in when the gateway has one.
async function boot() {
  const res = await fetch("/auth/session", { cache: "no-store" }).catch(() => null);
  const data = res ? await res.json().catch(() => null) : null;
  if (res && res.ok && data) {
    csrf = data.csrf_token;
    await start("");
    return;
  }
  if (data && data.error && data.error.code === "not_signed_in") $("#sso").hidden = false;
  if (storedToken()) start(storedToken());
}
boot();
