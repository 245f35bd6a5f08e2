// judge results viewer: the experiment page of an experiment job ("/experiments/<id>"). Plain
// JavaScript, no build step; uses el/api/fmt/statusBadge/jobActions/progressBar of app.js and
// pval/signed/verdictBadge/PALETTE of compare.js (called only once all are loaded).
// The answer first (the best configuration, its interval and its test against the baseline),
// then the configurations' table, the heat map of a two-knob grid, and two configurations side
// by side query by query (GET /v1/experiments/<id>/pair), largest disagreement first.
"use strict";

function knobText(params, knobs) {
  return knobs.map((k) => `${k}=${params[k]}`).join(" ");
}

function answerCard(report) {
  const e = report.experiment;
  const best = e.best;
  const s = best ? report.systems[best] : null;
  const ci = s && s.ci ? s.ci[e.objective] : null;
  const baseline = report.conventions.baseline;
  const test = report.comparisons.find((c) => c.system === best && c.measure === e.objective);
  return el("div", { class: "card verdict", id: "answer", "data-best": best || "" },
    best === null ? el("p", {}, "No configuration could be scored.") : [
      el("div", { id: "best" }, el("span", { class: "muted" }, `Best on ${e.objective}: `), el("strong", {}, best),
        ` ${fmt(e.best_value)}`, ci ? el("span", { class: "muted", id: "best-ci" }, ` (${Math.round((report.conventions.confidence || 0.95) * 100)}% interval ${fmt(ci[0])} – ${fmt(ci[1])})`) : null),
      el("div", { id: "best-test" }, e.best_vs_baseline || "", test ? el("span", { class: "muted" }, ` · ${testWords(test)}`) : null),
      e.tie_group && e.pairwise && e.pairwise.length ? el("div", { id: "tie-group", "data-members": e.tie_group.join(" ") },
        el("span", { class: "muted" }, `Tie group of the best (Holm over all ${e.pairwise.length} pairs): `), e.tie_group.join(", "),
        el("span", { class: "muted" }, e.tie_group.length > 1 ? ` · ${e.tie_group.length - 1} configuration(s) its test cannot tell from ${best}` : ` · every other configuration is significantly below ${best}`)) : null,
      el("div", { class: "muted" }, `${e.configurations.length} configurations (${e.strategy}) · baseline ${baseline} · ${e.queries} queries · ${e.pairs} pairs judged of ${e.nominal_pairs} nominal · ${e.calls} judge calls`),
      el("div", { class: "muted", id: "tested-figure", "data-figure": report.conventions.tested_figure || "thresholded" },
        `Tested figure: ${report.conventions.tested_figure || "thresholded"}` + (report.conventions.tested_figure_reason ? ` (${report.conventions.tested_figure_reason})` : "")),
    ]);
}

// Every pair of configurations on the objective (the tested figure): diff b − a, the
// randomization p and its Holm adjustment over all pairs; folded when long.
function pairwiseTable(report) {
  const e = report.experiment;
  if (!e.pairwise || !e.pairwise.length) return null;
  const head = el("tr", {}, ["a", "b", "n", "diff (b − a)", "p", "p (Holm, all pairs)"].map((h) => el("th", {}, h)));
  const rows = e.pairwise.map((p) => el("tr", { class: p.p_holm !== null && p.p_holm < ALPHA ? "sig" : "" },
    el("td", {}, p.a), el("td", {}, p.b), el("td", { class: "num" }, String(p.n)),
    el("td", { class: "num " + (p.diff > 0 ? "pos" : p.diff < 0 ? "neg" : "") }, signed(p.diff)),
    el("td", { class: "num" }, pval(p.p_value)), el("td", { class: "num" }, pval(p.p_holm))));
  return el("details", { id: "pairwise", open: e.pairwise.length <= 15 ? "" : null },
    el("summary", {}, `Every pair of configurations on ${e.objective} (${e.pairwise.length})`),
    el("table", {}, el("thead", {}, head), el("tbody", {}, rows)));
}

function configsTable(report, pick) {
  const e = report.experiment;
  const alpha = 1 - (report.conventions.confidence || 0.95);
  const cmp = new Map(report.comparisons.filter((c) => c.measure === e.objective).map((c) => [c.system, c]));
  const head = el("tr", {}, ["configuration", ...e.knobs, e.objective, "interval", "diff vs baseline", "p (Holm)", "coverage", "compare"].map((h) => el("th", {}, h)));
  const rows = e.configurations.map((c, i) => {
    const ci = (report.systems[c.name].ci || {})[e.objective];
    const t = cmp.get(c.name);
    return el("tr", { "data-config": c.name, class: (c.name === e.best ? "best " : "") + (t && (t.decision ? t.decision === "significant" : t.p_holm !== null && t.p_holm < alpha) ? "sig" : "") },
      el("td", {}, el("strong", {}, c.name), i === 0 ? el("small", { class: "muted" }, " baseline") : null),
      e.knobs.map((k) => el("td", { class: "num" }, String(c.params[k]))),
      el("td", { class: "num" }, fmt(c.objective)),
      el("td", { class: "num" }, ci ? `${fmt(ci[0], 3)} – ${fmt(ci[1], 3)}` : "–"),
      el("td", { class: "num " + (t ? (t.diff > 0 ? "pos" : t.diff < 0 ? "neg" : "") : "") }, t ? signed(t.diff) : "–"),
      el("td", { class: "num" }, t ? pval(t.p_holm) + (t.p_holm_se ? " ± " + pval(t.p_holm_se) : "") + (t.decision === "undecided" ? " (undecided)" : "") : "–"),
      el("td", { class: "num" }, Object.entries(c.coverage || {}).map(([k, v]) => `@${k} ${v === null ? "–" : Math.round(v * 100) + "%"}`).join(" ")),
      el("td", {}, el("button", { type: "button", class: "link", onclick: () => pick("a", c.name) }, "A"), " ",
        el("button", { type: "button", class: "link", onclick: () => pick("b", c.name) }, "B")));
  });
  return el("table", { id: "configs" }, el("thead", {}, head), el("tbody", {}, rows));
}

// The heat map of a two-knob grid: the objective of every point, coloured from the lowest
// (light) to the highest (dark); a click on a cell chooses that configuration as B.
function heatMap(report, pick) {
  const e = report.experiment;
  if (!e.knobs || e.knobs.length !== 2) return null;
  const [kr, kc] = e.knobs;
  const uniq = (k) => [...new Set(e.configurations.map((c) => c.params[k]))].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  const rowsV = uniq(kr), colsV = uniq(kc);
  const vals = e.configurations.map((c) => c.objective).filter((v) => typeof v === "number");
  const lo = Math.min(...vals), hi = Math.max(...vals);
  const cell = (rv, cv) => {
    const c = e.configurations.find((x) => x.params[kr] === rv && x.params[kc] === cv);
    if (!c) return el("td", { class: "hm empty" }, "–");
    const t = hi > lo && typeof c.objective === "number" ? (c.objective - lo) / (hi - lo) : 1;
    const td = el("td", { class: "hm" + (c.name === e.best ? " best" : ""), "data-config": c.name, title: c.name,
      style: `background:rgba(46,91,218,${(0.12 + 0.78 * t).toFixed(3)});color:${t > 0.55 ? "#fff" : "#1d2330"}` }, fmt(c.objective));
    td.addEventListener("click", () => pick("b", c.name));
    return td;
  };
  return el("div", { class: "card" }, el("h3", {}, `${e.objective} over ${kr} (rows) × ${kc} (columns)`),
    el("table", { class: "heatmap", id: "heatmap" },
      el("thead", {}, el("tr", {}, el("th", {}, `${kr} \\ ${kc}`), colsV.map((v) => el("th", { class: "num" }, String(v))))),
      el("tbody", {}, rowsV.map((rv) => el("tr", {}, el("th", { class: "num" }, String(rv)), colsV.map((cv) => cell(rv, cv)))))));
}

// A passage's reason on request: the one kept (the pool's, or asked before), else the judge
// is asked now for this pair (POST /v1/jobs/<id>/reasons: one call, kept for the next open).
async function askReason(jobId, p, box) {
  box.textContent = "Asking the judge for its reason…";
  box.dataset.asking = "1";
  let resp = null, data = {};
  try {
    resp = await api(`/v1/jobs/${encodeURIComponent(jobId)}/reasons`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query_id: p.qid, docno: p.docno }) });
    data = await resp.json();
  } catch (e) { data = { detail: String(e.message || e) }; }
  delete box.dataset.asking;
  if (resp && resp.ok) { p.reason = data.reason; box.textContent = data.reason; box.dataset.asked = "1"; }
  else box.textContent = "No reason: " + (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail || `HTTP ${resp ? resp.status : "?"}`));
}

function pairPassage(jobId, p, side) {
  const askable = !p.reason && p.source === "judge" && p.verdict !== "unjudged";
  const reason = el("div", { class: "reason", hidden: true }, p.reason || (p.source === "human" ? "a person's label" : askable ? "" : "no reason"));
  const show = el("button", { type: "button", class: "link reason-btn" }, "reason");
  show.addEventListener("click", () => {
    reason.hidden = !reason.hidden;
    if (!reason.hidden && !p.reason && askable && !reason.dataset.asking) askReason(jobId, p, reason);
  });
  const review = el("a", { class: "review-link", href: `/jobs/${encodeURIComponent(jobId)}/review?query_id=${encodeURIComponent(p.qid)}&docno=${encodeURIComponent(p.docno)}` }, "review");
  return el("li", { class: p.only ? "only" : null, "data-docno": p.docno, "data-verdict": p.verdict, "data-only": p.only ? side : null },
    verdictBadge(p), p.only ? el("span", { class: "badge only-mark" }, `only ${side.toUpperCase()}`) : null,
    el("span", { class: "muted" }, " " + p.docno + " · "), show, " · ", review,
    el("div", { class: "text" }, p.text), reason);
}

function pairQuery(jobId, data, q) {
  const col = (side) => {
    const s = q[side];
    const name = data[side];
    return el("div", { class: "dcol", "data-side": side },
      el("h4", {}, `${side.toUpperCase()}: ${name}`, el("span", { class: "muted" }, ` ${data.measure} ${fmt(s.value)}`)),
      s.passages.length ? el("ol", {}, s.passages.map((p) => pairPassage(jobId, Object.assign({ qid: q.id }, p), side))) : el("p", { class: "muted" }, "no result for this query"));
  };
  return el("div", { class: "card pq", "data-qid": q.id, "data-diff": q.diff === null ? "" : String(q.diff) },
    el("h3", {}, el("code", {}, q.id), " ", q.query,
      el("span", { class: "muted diff" }, ` · ${data.measure} B − A ${q.diff === null ? "–" : signed(q.diff)} · only A ${q.only_a} · only B ${q.only_b}`)),
    el("div", { class: "dcols" }, col("a"), col("b")));
}

const PAIR_ORDERS = {
  disagreement: (x, y) => (x.diff === null) - (y.diff === null) || Math.abs(y.diff || 0) - Math.abs(x.diff || 0) || (x.id < y.id ? -1 : 1),
  "b-better": (x, y) => (x.diff === null) - (y.diff === null) || (y.diff || 0) - (x.diff || 0) || (x.id < y.id ? -1 : 1),
  "a-better": (x, y) => (x.diff === null) - (y.diff === null) || (x.diff || 0) - (y.diff || 0) || (x.id < y.id ? -1 : 1),
  query: (x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0),
};

async function experimentPage(jobId) {
  document.title = "judge · experiment " + jobId;
  const head = el("div", { class: "card", id: "job-head" });
  const body = el("div", { id: "experiment-body" });
  $main.replaceChildren(el("h1", {}, "Experiment ", el("code", {}, jobId)), head, body);
  const base = `/v1/experiments/${encodeURIComponent(jobId)}`;

  function drawHead(job) {
    const actions = jobActions(job, base, false);
    const links = job.status === "done" ? [
      el("a", { href: `${base}/report?format=html`, id: "report-html" }, "report.html"), " · ",
      el("a", { href: `${base}/report?format=md` }, "report.md"), " · ", el("a", { href: `${base}/report` }, "report.json"), " · ",
      el("a", { href: `/jobs/${encodeURIComponent(jobId)}/review`, id: "review-link" }, "review the pooled verdicts"),
    ] : [];
    const grid = Object.entries(job.options.grid || {}).map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(", ") : `${v.low} – ${v.high}`}`).join(" · ");
    head.replaceChildren(...[
      el("div", { class: "filters" }, statusBadge(job.status), progressBar(job.queries_done, job.queries_total),
        el("span", { id: "progress-text" }, `pool: ${job.queries_done}/${job.queries_total} queries judged · ${job.passages_done} pairs · ${job.unjudged} unjudged`), ...actions),
      job.error ? el("p", { class: "err" }, job.error) : null,
      el("p", { class: "muted" }, `configuration ${job.options.config} · ${grid}${job.options.trials ? ` · ${job.options.trials} trials` : ""} · mode ${job.options.mode} · created ${job.created}`),
      links.length ? el("p", { class: "links" }, links) : null,
    ].filter(Boolean));
  }

  async function drawBody(job) {
    if (job.status !== "done") {
      body.replaceChildren(el("p", { class: "muted" }, job.status === "failed" || job.status === "cancelled"
        ? "No report: the experiment did not finish." : "The answer appears when every configuration is searched and the pool is judged."));
      return;
    }
    const report = await (await api(`${base}/report`)).json();
    ALPHA = alphaOf(report);
    const e = report.experiment;
    const names = e.configurations.map((c) => c.name);
    const chosen = { a: names[0], b: e.best && e.best !== names[0] ? e.best : names[names.length - 1] };
    const selA = el("select", { id: "pick-a" }, names.map((n) => el("option", { value: n }, n)));
    const selB = el("select", { id: "pick-b" }, names.map((n) => el("option", { value: n }, n)));
    const order = el("select", { id: "pair-order" },
      el("option", { value: "disagreement" }, "largest disagreement first"), el("option", { value: "b-better" }, "B better first"),
      el("option", { value: "a-better" }, "A better first"), el("option", { value: "query" }, "by query id"));
    const pairMsg = el("span", { class: "muted", id: "pair-msg" });
    const pairBox = el("div", { id: "pair" });
    let pairData = null;

    function drawPair() {
      if (!pairData) return;
      const qs = [...pairData.queries].sort(PAIR_ORDERS[order.value]);
      pairBox.replaceChildren(...qs.map((q) => pairQuery(jobId, pairData, q)));
      pairBox.dataset.a = pairData.a;
      pairBox.dataset.b = pairData.b;
      pairBox.dataset.order = order.value;
    }

    async function loadPair() {
      selA.value = chosen.a; selB.value = chosen.b;
      pairMsg.textContent = "loading…";
      const resp = await api(`${base}/pair?a=${encodeURIComponent(chosen.a)}&b=${encodeURIComponent(chosen.b)}`);
      const data = await resp.json();
      if (!resp.ok) { pairMsg.className = "err"; pairMsg.textContent = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail); return; }
      pairData = data;
      pairMsg.className = "muted";
      pairMsg.textContent = `${data.queries.length} queries · ${data.measure}: B − A per query`;
      drawPair();
    }

    function pick(side, name) { chosen[side] = name; loadPair().then(() => pairBox.scrollIntoView()); }
    selA.addEventListener("change", () => pick("a", selA.value));
    selB.addEventListener("change", () => pick("b", selB.value));
    order.addEventListener("change", drawPair);
    body.replaceChildren(...[
      answerCard(report),
      el("h2", {}, "Configurations"), configsTable(report, pick), pairwiseTable(report),
      heatMap(report, pick),
      el("h2", {}, "Two configurations, query by query"),
      el("div", { class: "filters" }, el("label", {}, "A ", selA), el("label", {}, "B ", selB), el("label", {}, "order ", order), pairMsg),
      pairBox,
    ].filter(Boolean));
    await loadPair();
  }

  const job = await (await api(base)).json();
  if (job.detail) { head.replaceChildren(el("p", { class: "err" }, String(job.detail))); return; }
  await followJob(base, job, drawHead, drawBody);
}
