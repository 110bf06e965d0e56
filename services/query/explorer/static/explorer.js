// GAAMA memory explorer. Every value shown comes from the API and is written with textContent:
// memory text is what end users said, never markup.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE = "gaama-explorer-credential";

function credential() {
  return sessionStorage.getItem(STORE) || "";
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function when(t) {
  if (t === null || t === undefined) return "";
  return new Date(t * 1000).toISOString().replace(".000Z", "Z");
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + credential() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  let data = null;
  try {
    data = await r.json();
  } catch (_) {
    data = null;
  }
  if (!r.ok) {
    const msg = data && (data.error || data.detail) ? data.error || data.detail : r.statusText;
    throw new Error(r.status + ": " + (typeof msg === "string" ? msg : JSON.stringify(msg)));
  }
  return data;
}

function status(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "muted";
}

function validity(item) {
  if (item.valid_to !== null && item.valid_to !== undefined) {
    return "ended " + when(item.valid_to) + (item.superseded_by ? " (superseded)" : "");
  }
  if (item.valid_from !== null && item.valid_from !== undefined) return "since " + when(item.valid_from);
  return "";
}

function showResults(res) {
  const body = $("results").querySelector("tbody");
  body.replaceChildren();
  res.ranked.forEach((item, i) => {
    const tr = el("tr");
    tr.dataset.id = item.id;
    if (item.valid_to !== null && item.valid_to !== undefined) tr.className = "superseded";
    tr.append(
      el("td", i + 1, "num"),
      el("td", item.kind, "kind"),
      el("td", item.text),
      el("td", item.sim.toFixed(3), "num"),
      el("td", item.ppr.toFixed(3), "num"),
      el("td", item.score.toFixed(3), "num"),
      el("td", validity(item)),
    );
    tr.addEventListener("click", () => showNode(item.id));
    body.append(tr);
  });
  $("results").hidden = false;
  const st = res.stats || {};
  const parts = Object.entries(st.timings_ms || {}).map(([k, v]) => k + " " + v.toFixed(1) + " ms");
  status(res.ranked.length + " ranked, " + res.memory.length + " packed (" + res.mode + " mode" +
    (st.subgraph_nodes ? ", subgraph " + st.subgraph_nodes + " nodes" : "") + ")" +
    (parts.length ? " · " + parts.join(", ") : ""));
}

function nodeLink(id, label) {
  const a = el("a", label || id, "node");
  a.dataset.id = id;
  a.addEventListener("click", () => showNode(id));
  return a;
}

async function showNode(id) {
  const box = $("node");
  box.className = "";
  box.replaceChildren(el("p", "Loading " + id + " …", "muted"));
  let n;
  try {
    n = await api("GET", "/v1/nodes/" + encodeURIComponent(id));
  } catch (e) {
    box.replaceChildren(el("p", e.message, "error"));
    return;
  }
  const dl = el("dl");
  const row = (k, v) => {
    if (v === null || v === undefined || v === "") return;
    dl.append(el("dt", k));
    const dd = el("dd");
    if (v instanceof Node) dd.append(v);
    else dd.textContent = String(v);
    dl.append(dd);
  };
  row("id", n.id);
  row("kind", n.kind);
  row("text", n.text);
  row("time", when(n.time));
  row("conversation", n.conversation);
  row("subject", n.subject);
  row("speaker", n.speaker);
  row("turn", n.turn_id);
  row("belief", n.belief);
  row("valid from", when(n.valid_from));
  row("valid to", when(n.valid_to));
  row("learned at", when(n.learned_at));
  row("retired at", when(n.retired_at));
  if (n.superseded_by) row("superseded by", nodeLink(n.superseded_by));
  row("why ended", n.superseded_reason);
  const parts = [dl];
  if (n.sources && n.sources.length) {
    // Provenance down to the turns: each source with its own text (the first ten).
    parts.push(el("h2", "Derived from"));
    const ul = el("ul");
    const shown = n.sources.slice(0, 10);
    const read = await Promise.all(
      shown.map((s) => api("GET", "/v1/nodes/" + encodeURIComponent(s)).catch(() => null)),
    );
    shown.forEach((s, i) => {
      const li = el("li");
      li.append(nodeLink(s));
      const src = read[i];
      if (src) li.append(el("span", " " + (src.turn_id ? src.turn_id + " · " : "") + src.text, "muted"));
      ul.append(li);
    });
    if (n.sources.length > shown.length) ul.append(el("li", "… " + (n.sources.length - shown.length) + " more"));
    parts.push(ul);
  }
  parts.push(el("h2", "Neighbours (" + n.neighbours.length + " of " + n.neighbours_total + ")"));
  const table = el("table");
  table.id = "neighbours";
  const head = el("tr");
  ["edge", "dir", "kind", "node", "weight"].forEach((h) => head.append(el("th", h)));
  table.append(head);
  n.neighbours.forEach((nb) => {
    const tr = el("tr");
    const cell = el("td");
    cell.append(nodeLink(nb.id));
    tr.append(el("td", nb.edge), el("td", nb.direction), el("td", nb.kind, "kind"), cell,
      el("td", nb.weight.toFixed(3), "num"));
    table.append(tr);
  });
  parts.push(table);
  box.replaceChildren(...parts);
}

function scope() {
  const s = {};
  const c = $("conversation").value.trim();
  const u = $("subject").value.trim();
  if (c) s.conversation = c;
  if (u) s.subject = u;
  return Object.keys(s).length ? s : undefined;
}

async function search(ev) {
  ev.preventDefault();
  if (!credential()) {
    status("Enter a key or token first.", true);
    return;
  }
  const body = { query: $("query").value, mode: $("mode").value, k: Number($("k").value) };
  const sc = scope();
  if (sc) body.scope = sc;
  if ($("as-of").value) body.as_of = new Date($("as-of").value).getTime() / 1000;
  status("Searching …");
  try {
    showResults(await api("POST", "/v1/search", body));
  } catch (e) {
    $("results").hidden = true;
    status(e.message, true);
  }
}

async function forget(ev) {
  ev.preventDefault();
  const id = $("forget-id").value.trim();
  if (!id) return;
  await showJson(() => api("GET", "/v1/forget/" + encodeURIComponent(id)));
}

async function showJson(call) {
  const out = $("forget-out");
  out.hidden = false;
  try {
    out.className = "";
    out.textContent = JSON.stringify(await call(), null, 2);
  } catch (e) {
    out.className = "error";
    out.textContent = e.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(STORE, $("credential").value);
    $("credential").value = "";
    $("who").textContent = "credential set for this tab";
  });
  if (credential()) $("who").textContent = "credential set for this tab";
  $("search").addEventListener("submit", search);
  $("forget").addEventListener("submit", forget);
  $("audit").addEventListener("click", () => showJson(() => api("GET", "/v1/audit?limit=20")));
});
