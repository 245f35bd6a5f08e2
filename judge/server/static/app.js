// judge results viewer: plain JavaScript, no build step, nothing loaded from the network
// beyond this server. Pages: "/" (submit + job list), "/jobs/<id>" (one scoring job),
// "/jobs/<id>/review" (the review queue: review.js), "/compare/<id>" (one comparison of
// systems: compare.js) and "/experiments/<id>" (one search experiment: experiment.js).
"use strict";

const $main = document.getElementById("main");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v; // CSSOM, not an inline style attribute: allowed by the CSP
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(path, options) {
  const resp = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  if (resp.status === 401) { location.reload(); throw new Error("signed out"); }
  return resp;
}

const fmt = (x, d = 4) => (x === null || x === undefined ? "–" : typeof x === "number" ? x.toFixed(d) : String(x));
const pct = (a, b) => (b ? Math.round((100 * a) / b) : 100);

function statusBadge(s) { return el("span", { class: "status " + s, "data-status": s }, s); }

// A job's buttons: Cancel while it is queued or running; Retry unjudged (where the kind has
// it, `retry`) once it is done with unjudged passages. `base`: the job's API path.
function jobActions(job, base, retry = true) {
  const actions = [];
  if (job.status === "queued" || job.status === "running")
    actions.push(el("button", { onclick: () => api(`${base}/cancel`, { method: "POST" }) }, "Cancel"));
  if (retry && job.status === "done" && job.unjudged > 0)
    actions.push(el("button", { onclick: () => api(`${base}/retry-unjudged`, { method: "POST" }).then(() => location.reload()) }, "Retry unjudged"));
  return actions;
}

function progressBar(done, total) {
  return el("div", { class: "bar", title: `${done}/${total}` }, el("span", { style: `width:${pct(done, total)}%` }));
}

async function loadInfo() {
  try {
    const info = await (await api("/v1/info")).json();
    document.getElementById("backend").textContent = `${info.backend} · ${info.model} · v${info.version}`;
    // Sign out only where there is something to sign out of: a server with API keys.
    document.getElementById("signout").hidden = !info.auth;
  } catch (e) { /* the page itself reports errors */ }
}

// ---------------------------------------------------------------- job list
function submitForm() {
  const msg = el("span", { class: "muted", id: "submit-msg" });
  const text = el("textarea", { name: "ndjson", id: "ndjson", placeholder: '{"id": "q1", "query": "小狗贫血的表现", "retrieval_context": ["小狗贫血时牙龈颜色变淡。", "狗粮的保质期一般为一年。"]}' });
  const file = el("input", { type: "file", id: "file", accept: ".jsonl,.ndjson,.json,.txt" });
  const mode = el("select", { id: "mode" }, el("option", { value: "" }, "mode: server default"), el("option", { value: "binary" }, "binary"), el("option", { value: "graded" }, "graded"));
  const form = el("form", { class: "card submit", id: "submit-form" },
    el("h2", {}, "Submit a dataset"),
    el("p", { class: "muted" }, "One JSON object per line, as judge score reads it (paste it or pick a file)."),
    text,
    el("div", { class: "row" }, file, mode, el("button", { class: "primary", type: "submit", id: "submit" }, "Submit"), msg));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let body = text.value;
    if (file.files.length) body = await file.files[0].text();
    if (!body.trim()) { msg.textContent = "nothing to submit"; return; }
    const q = mode.value ? `?mode=${mode.value}` : "";
    const resp = await api("/v1/jobs" + q, { method: "POST", headers: { "Content-Type": "application/x-ndjson" }, body });
    const data = await resp.json();
    if (resp.ok) { location.href = "/jobs/" + data.id; }
    else { msg.className = "err"; msg.textContent = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail); }
  });
  return form;
}

function jobHref(j) { return (j.kind === "compare" ? "/compare/" : j.kind === "experiment" ? "/experiments/" : "/jobs/") + encodeURIComponent(j.id); }

async function jobList() {
  document.title = "judge · jobs";
  const tbody = el("tbody", { id: "jobs" });
  $main.replaceChildren(el("h1", {}, "Jobs"), submitForm(),
    el("table", {}, el("thead", {}, el("tr", {}, ["Job", "Kind", "Status", "Progress", "Queries", "Passages", "Unjudged", "Rejected", "ETA", "Created"].map((h) => el("th", {}, h)))), tbody));
  let timer = null;
  async function refresh() {
    const data = await (await api("/v1/jobs?limit=100")).json();
    tbody.replaceChildren(...(data.jobs.length ? data.jobs.map((j) => el("tr", { "data-job": j.id, "data-kind": j.kind },
      el("td", {}, el("a", { href: jobHref(j) }, j.id)),
      el("td", {}, j.kind === "compare" ? el("a", { href: jobHref(j), class: "kind compare" }, "comparison")
        : j.kind === "experiment" ? el("a", { href: jobHref(j), class: "kind experiment" }, "experiment") : el("span", { class: "kind" }, j.kind)),
      el("td", {}, statusBadge(j.status)),
      el("td", {}, progressBar(j.queries_done, j.queries_total)),
      el("td", { class: "num" }, `${j.queries_done}/${j.queries_total}`), el("td", { class: "num" }, j.passages_done),
      el("td", { class: "num" }, j.unjudged), el("td", { class: "num" }, j.rejected),
      el("td", { class: "num" }, j.eta_s === null ? "–" : `${Math.round(j.eta_s)} s`), el("td", {}, j.created))) :
      [el("tr", {}, el("td", { colspan: 10, class: "muted" }, "No jobs yet."))]));
    const live = data.jobs.some((j) => j.status === "queued" || j.status === "running");
    timer = setTimeout(refresh, live ? 1000 : 5000);
  }
  await refresh();
  window.addEventListener("pagehide", () => clearTimeout(timer));
}

// ---------------------------------------------------------------- one job
function stat(k, v) { return el("div", { class: "stat" }, el("div", { class: "v" }, v), el("div", { class: "k" }, k)); }

function summaryCards(job) {
  const s = job.summary;
  if (!s) return el("p", { class: "muted" }, "The summary appears when the job is done.");
  const j = s.judge || {};
  const people = s.human_labels;  // verdicts decided by reviewers (review.js)
  const items = [stat("queries", s.queries), stat("passages", s.passages), stat("unjudged", s.unjudged),
    stat(people ? "mAP (judge + people)" : "mAP (judge)", fmt(j.map)), stat("mean score", fmt(j.mean_score)), stat("MRR", fmt(j.mrr))];
  if (people) items.push(stat("mAP (judge only)", fmt((s.judge_only || {}).map)), stat("decided by people", `${people.passages} (${people.changed} changed)`));
  for (const [k, v] of Object.entries(j.ndcg || {})) items.push(stat(`NDCG@${k}`, fmt(v)));
  for (const [k, v] of Object.entries(j.precision || {})) items.push(stat(`P@${k}`, fmt(v)));
  const gt = s.ground_truth;
  if (gt) {
    items.push(stat("mAP (ground truth)", fmt(gt.map)));
    if (gt.judge_agreement) items.push(stat("agreement with ground truth", fmt(gt.judge_agreement.accuracy, 3)));
  }
  return el("div", { class: "cards", id: "summary" }, items);
}

function histogram(records) {
  const counts = [0, 0, 0, 0, 0];
  for (const r of records) if (r.score !== null && r.score !== undefined) counts[Math.min(Math.floor(r.score * 5), 4)] += 1;
  const max = Math.max(1, ...counts);
  const labels = ["0–0.2", "0.2–0.4", "0.4–0.6", "0.6–0.8", "0.8–1"];
  return el("div", { class: "card" }, el("h2", {}, "Score distribution (share of relevant passages per query)"),
    el("div", { class: "hist", id: "hist" }, counts.map((c, i) => el("div", { class: "col", title: `${labels[i]}: ${c}` },
      el("small", {}, c), el("span", { class: "b", style: `height:${(100 * c) / max}%` }), el("small", {}, labels[i])))));
}

function disagrees(r) {
  const a = r.ground_truth && r.ground_truth.agreement;
  return !!a && (a.fp + a.fn) > 0;
}

function verdictCell(v) {
  const who = v.source === "human" ? el("small", { class: "muted", title: v.replaced ? `judge: ${v.replaced.verdict}` : null }, ` (${v.reviewer})`) : null;
  return el("span", { class: "v-" + v.verdict }, v.verdict, who);
}

async function passagesRow(jobId, record, ncols) {
  const cell = el("td", { colspan: ncols }, el("span", { class: "muted" }, "Loading…"));
  const row = el("tr", { class: "detail" }, cell);
  api(`/v1/jobs/${encodeURIComponent(jobId)}/queries/${encodeURIComponent(record.id)}`).then((r) => r.json()).then((d) => {
    const rows = d.passages.map((p) => {
      const v = p.verdict;
      const truthRel = p.truth === null ? null : p.truth >= 1;
      const mismatch = truthRel !== null && v.verdict !== "unjudged" && (v.verdict === "yes") !== truthRel;
      return el("tr", { class: mismatch ? "mismatch" : null, "data-rank": p.rank },
        el("td", { class: "num" }, p.rank), el("td", {}, p.docno), el("td", { class: "text" }, p.text === null ? "" : p.text),
        el("td", {}, verdictCell(v)), el("td", { class: "num" }, v.grade === null ? "–" : v.grade),
        el("td", { class: "num" }, fmt(v.p_yes, 3)), el("td", { class: "reason" }, v.reason || v.error || ""),
        el("td", { class: "num" }, p.truth === null ? "–" : p.truth));
    });
    cell.replaceChildren(el("div", {}, el("strong", {}, record.query)),
      el("table", { class: "passages" }, el("thead", {}, el("tr", {}, ["#", "docno", "passage", "verdict", "grade", "P(yes)", "reason", "truth"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
  });
  return row;
}

function queryTable(job, records) {
  const ks = Object.keys((records[0] && records[0].ndcg) || {});
  const cols = [
    { k: "id", label: "id", get: (r) => String(r.id) },
    { k: "query", label: "query", get: (r) => r.query },
    { k: "n", label: "passages", get: (r) => r.n_passages, num: true },
    { k: "score", label: "score", get: (r) => r.score, num: true, metric: true },
    { k: "ap", label: "AP", get: (r) => r.ap, num: true, metric: true },
    ...ks.map((c) => ({ k: "ndcg" + c, label: `NDCG@${c}`, get: (r) => (r.ndcg || {})[c], num: true, metric: true })),
    { k: "unjudged", label: "unjudged", get: (r) => r.unjudged, num: true },
    { k: "gt_ap", label: "AP (truth)", get: (r) => (r.ground_truth ? r.ground_truth.ap : null), num: true, metric: true },
    { k: "agree", label: "disagree", get: (r) => (r.ground_truth ? r.ground_truth.agreement.fp + r.ground_truth.agreement.fn : null), num: true },
  ];
  let sortKey = null, asc = true, open = null;
  const onlyUnjudged = el("input", { type: "checkbox", id: "f-unjudged" });
  const onlyDisagree = el("input", { type: "checkbox", id: "f-disagree" });
  const search = el("input", { type: "search", id: "f-search", placeholder: "search query or id" });
  const count = el("span", { class: "muted", id: "f-count" });
  const head = el("tr", {}, cols.map((c) => el("th", { class: "sortable", "data-col": c.k, onclick: () => { asc = sortKey === c.k ? !asc : true; sortKey = c.k; draw(); } }, c.label)));
  const tbody = el("tbody", { id: "queries" });
  function draw() {
    for (const th of head.children) th.className = "sortable" + (th.dataset.col === sortKey ? (asc ? " asc" : " desc") : "");
    const needle = search.value.trim().toLowerCase();
    let rows = records.filter((r) => (!onlyUnjudged.checked || r.unjudged > 0) && (!onlyDisagree.checked || disagrees(r)) &&
      (!needle || String(r.id).toLowerCase().includes(needle) || r.query.toLowerCase().includes(needle)));
    if (sortKey) {
      const col = cols.find((c) => c.k === sortKey);
      rows = rows.slice().sort((a, b) => {
        const x = col.get(a), y = col.get(b);
        if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (asc ? 1 : -1);
      });
    }
    count.textContent = `${rows.length} of ${records.length} queries`;
    const out = [];
    for (const r of rows) {
      const tr = el("tr", { class: "q" + (open === r.id ? " open" : ""), "data-qid": r.id, onclick: () => { open = open === r.id ? null : r.id; draw(); } },
        cols.map((c) => { const v = c.get(r); return el("td", { class: c.num ? "num" : null }, c.metric ? fmt(v) : v === null || v === undefined ? "–" : v); }));
      out.push(tr);
      if (open === r.id) passagesRow(job.id, r, cols.length).then((row) => tr.after(row));
    }
    tbody.replaceChildren(...out);
  }
  for (const f of [onlyUnjudged, onlyDisagree]) f.addEventListener("change", draw);
  search.addEventListener("input", draw);
  draw();
  return el("div", {}, el("h2", {}, "Queries"),
    el("div", { class: "filters" }, el("label", {}, onlyUnjudged, " only with unjudged passages"),
      el("label", {}, onlyDisagree, " only disagreeing with ground truth"), search, count),
    el("table", {}, el("thead", {}, head), tbody));
}

async function allResults(jobId) {
  const out = [];
  let offset = 0;
  for (let page = 0; page < 1000; page++) {
    const resp = await api(`/v1/jobs/${encodeURIComponent(jobId)}/results?offset=${offset}&limit=2000`);
    const text = await resp.text();
    for (const line of text.split("\n")) if (line.trim()) out.push(JSON.parse(line));
    const next = resp.headers.get("X-Next-Offset");
    if (!next) break;
    offset = Number(next);
  }
  return out;
}

async function jobPage(jobId) {
  document.title = "judge · " + jobId;
  const head = el("div", { class: "card", id: "job-head" });
  const body = el("div", { id: "job-body" });
  $main.replaceChildren(el("h1", {}, "Job ", el("code", {}, jobId)), head, body);

  const base = `/v1/jobs/${encodeURIComponent(jobId)}`;
  function drawHead(job) {
    const actions = jobActions(job, base);
    head.replaceChildren(...[
      el("div", { class: "filters" }, statusBadge(job.status), progressBar(job.queries_done, job.queries_total),
        el("span", { id: "progress-text" }, `${job.queries_done}/${job.queries_total} queries · ${job.passages_done} passages · ${job.unjudged} unjudged · ${job.rejected} rejected`),
        job.eta_s !== null && job.status === "running" ? el("span", { class: "muted" }, `ETA ${Math.round(job.eta_s)} s`) : null, ...actions),
      job.error ? el("p", { class: "err" }, job.error) : null,
      el("p", { class: "muted" }, `mode ${job.options.mode} · k ${job.options.k.join(", ")} · created ${job.created}`,
        " · ", el("a", { href: `${base}/results?format=qrels` }, "qrels"), " · ", el("a", { href: `${base}/results?format=run` }, "run"),
        " · ", el("a", { href: `${base}/results` }, "NDJSON"), job.rejected ? [" · ", el("a", { href: `${base}/rejects` }, "rejects")] : null),
    ].filter(Boolean));
  }

  async function drawBody(job) {
    const records = await allResults(jobId);
    body.replaceChildren(el("h2", {}, "Summary"), summaryCards(job), histogram(records), queryTable(job, records));
    if (job.status === "done") agreementSection(jobId).then((section) => body.insertBefore(section, body.children[2]));
  }

  const job = await (await api(`/v1/jobs/${encodeURIComponent(jobId)}`)).json();
  if (job.detail) { head.replaceChildren(el("p", { class: "err" }, String(job.detail))); return; }
  if (job.kind === "compare") { location.replace("/compare/" + encodeURIComponent(jobId)); return; }
  if (job.kind === "experiment") { location.replace("/experiments/" + encodeURIComponent(jobId)); return; }
  await followJob(`/v1/jobs/${encodeURIComponent(jobId)}`, job, drawHead, drawBody);
}

// Draw a job's page (head and body), then, while it is queued or running, follow its
// progress over server-sent events and draw it once more when it ends: the one way the job,
// comparison and experiment pages follow a job (``base``: its route, with ``/events``).
async function followJob(base, job, drawHead, drawBody) {
  drawHead(job);
  await drawBody(job);
  if (job.status !== "queued" && job.status !== "running") return;
  let drawnFinal = false;
  const es = new EventSource(`${base}/events`);
  es.addEventListener("progress", (ev) => drawHead(JSON.parse(ev.data)));
  es.addEventListener("end", async () => {
    es.close();
    if (drawnFinal) return;
    drawnFinal = true;
    const final = await (await api(base)).json();
    drawHead(final);
    await drawBody(final);
  });
}

function route() {
  loadInfo();
  const m = location.pathname.match(/^\/jobs\/([^/]+)\/?$/);
  const r = location.pathname.match(/^\/jobs\/([^/]+)\/review\/?$/);
  const c = location.pathname.match(/^\/compare\/([^/]+)\/?$/);
  const x = location.pathname.match(/^\/experiments\/([^/]+)\/?$/);
  if (m) jobPage(decodeURIComponent(m[1]));
  else if (r) reviewPage(decodeURIComponent(r[1]));
  else if (c) comparePage(decodeURIComponent(c[1]));
  else if (x) experimentPage(decodeURIComponent(x[1]));
  else jobList();
}

route();
