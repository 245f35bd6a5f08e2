// judge results viewer: the comparison page of a compare job ("/compare/<id>"). Plain
// JavaScript, no build step; uses el/api/fmt/statusBadge/jobActions/progressBar of app.js (loaded after
// this file, called only once both are loaded).
"use strict";

const PALETTE = ["#3366aa", "#dd7733", "#339966", "#aa3377", "#7766bb", "#999933", "#44aaaa", "#bb5555"];

function pval(p) {
  if (p === null || p === undefined) return "–";
  return p >= 0.0001 ? p.toFixed(4) : p.toExponential(1);
}

function signed(x) { return x === null || x === undefined ? "–" : (x >= 0 ? "+" : "") + x.toFixed(4); }

function alphaOf(report) { const c = report && report.conventions && report.conventions.confidence; return typeof c === "number" ? 1 - c : 0.05; }
let ALPHA = 0.05;
// The report's own decision (exact test, or Monte Carlo within its error of alpha: undecided);
// an older report without one: Holm p < alpha.
function decision(c) { return c.decision || (c.p_holm !== null && c.p_holm !== undefined && c.p_holm < ALPHA ? "significant" : "not significant"); }
function significant(c) { return decision(c) === "significant"; }
function interval(lo, hi) { return `${lo === null || lo === undefined ? "-inf" : fmt(lo)} to ${hi === null || hi === undefined ? "+inf" : fmt(hi)}`; }
// The randomization test's p with that test's own interval; the bootstrap CI named as such,
// and a disagreement between them said in words.
function testWords(c) {
  const level = `${Math.round((1 - ALPHA) * 1000) / 10}%`;
  const bootExcludes = c.ci_low > 0 || c.ci_high < 0;
  const rejects = c.p_value < ALPHA;
  const note = bootExcludes && !rejects ? " (the bootstrap CI excludes 0 but the randomization test does not reject: the verdict follows the test)"
    : rejects && !bootExcludes ? " (the randomization test rejects but the bootstrap CI includes 0: the verdict follows the test)" : "";
  const method = c.p_method === "monte carlo" ? ` (Monte Carlo, se ${pval(c.p_value_se)})` : c.p_method === "exact" ? " (exact)" : "";
  return `randomization test p=${pval(c.p_value)}${method}, its ${level} interval ${interval(c.randomization_ci_low, c.randomization_ci_high)}; ` +
    `bootstrap ${level} CI ${fmt(c.ci_low)} to ${fmt(c.ci_high)}${note}`;
}

function primaryOf(report) {
  const ms = report.conventions.measures || [];
  return ms.includes("map") ? "map" : ms[0];
}

// ---------------------------------------------------------------- sections
function verdictCard(report) {
  const primary = primaryOf(report);
  const names = Object.keys(report.systems);
  let best = null;
  for (const n of names) {
    const v = report.systems[n].measures[primary];
    if (typeof v === "number" && (best === null || v > report.systems[best].measures[primary])) best = n;
  }
  const items = report.comparisons.filter((c) => c.measure === primary).map((c) => {
    const word = significant(c) ? (c.diff > 0 ? "better than" : "worse than") : decision(c) === "undecided" ? "undecided (p within Monte Carlo error of alpha; raise resamples) against" : "not significantly different from";
    const stab = c.order_stability === null ? "" : ` · order stability ${c.order_stability.toFixed(3)}`;
    return el("li", { class: significant(c) ? (c.diff > 0 ? "win" : "loss") : "tie" },
      el("strong", {}, c.system), ` is ${word} `, el("strong", {}, c.baseline), ` on ${primary} (Holm p=${pval(c.p_holm)}${c.p_holm_se ? " ± " + pval(c.p_holm_se) : ""}): `,
      `diff ${signed(c.diff)}; ${testWords(c)}; `,
      `wins ${c.wins} / ties ${c.ties} / losses ${c.losses}${stab}`);
  });
  return el("div", { class: "card verdict" },
    el("div", { id: "winner", "data-system": best || "" },
      best === null ? "No system could be scored." : [el("span", { class: "muted" }, `Highest ${primary}: `), el("strong", {}, best),
        ` (${fmt(report.systems[best].measures[primary])})`]),
    el("ul", { id: "verdicts" }, items));
}

function poolCards(report) {
  const p = report.pool;
  return el("div", { class: "cards", id: "pool" },
    stat("queries", p.queries), stat("pairs (all systems)", p.pairs), stat("unique pairs", p.unique_pairs),
    stat("calls saved by pooling", p.calls_saved), stat("human labels", p.human_labels), stat("judged", p.judged),
    stat("unjudged", p.unjudged), stat("LLM calls (last run)", p.calls));
}

function meansChart(report, measure) {
  const names = Object.keys(report.systems);
  const rows = names.map((n, i) => {
    const s = report.systems[n];
    const v = s.measures[measure];
    const ci = (s.ci || {})[measure];
    const pctOf = (x) => `${Math.max(0, Math.min(1, x)) * 100}%`;
    return el("div", { class: "mrow", "data-system": n },
      el("span", { class: "mname", style: `color:${PALETTE[i % PALETTE.length]}` }, n),
      el("div", { class: "mtrack" },
        typeof v === "number" ? el("span", { class: "mbar", style: `width:${pctOf(v)};background:${PALETTE[i % PALETTE.length]}` }) : null,
        ci ? el("span", { class: "mci", style: `left:${pctOf(ci[0])};width:calc(${pctOf(ci[1])} - ${pctOf(ci[0])})`, title: `${fmt(ci[0])} – ${fmt(ci[1])}` }) : null),
      el("span", { class: "mval" }, typeof v === "number" ? fmt(v) : "–", ci ? el("small", { class: "muted" }, ` [${fmt(ci[0], 3)}, ${fmt(ci[1], 3)}]`) : null));
  });
  return el("div", { class: "card" }, el("h3", {}, `${measure}: each system's mean (bar) and its bootstrap interval (whiskers), on 0 – 1`),
    el("div", { class: "means-chart", id: "means-chart" }, rows));
}

function meansTable(report) {
  const measures = [...(report.conventions.measures || []), "map_isolated"];
  const head = el("tr", {}, el("th", {}, "system"), el("th", { class: "num" }, "queries"), measures.map((m) => el("th", { class: "num" }, m)));
  const rows = Object.entries(report.systems).map(([n, s], i) => el("tr", { "data-system": n },
    el("td", {}, el("strong", { style: `color:${PALETTE[i % PALETTE.length]}` }, n), i === 0 ? el("small", { class: "muted" }, " baseline") : null),
    el("td", { class: "num" }, s.queries),
    measures.map((m) => {
      const ci = (s.ci || {})[m];
      return el("td", { class: "num", title: ci ? `CI ${fmt(ci[0])} – ${fmt(ci[1])}` : null }, fmt(s.measures[m]),
        ci ? el("div", { class: "ci" }, `${fmt(ci[0], 3)} – ${fmt(ci[1], 3)}`) : null);
    })));
  return el("table", { id: "means" }, el("thead", {}, head), el("tbody", {}, rows));
}

function comparisonsTable(report) {
  const cols = ["system", "vs", "measure", "baseline", "system mean", "diff", "p (randomization)", "interval of that test", "p (Holm)", "bootstrap CI", "p (t-test)", "wins", "ties", "losses", "order stability"];
  const rows = report.comparisons.map((c) => el("tr", { class: significant(c) ? "sig" : null, "data-system": c.system, "data-measure": c.measure },
    el("td", {}, c.system), el("td", {}, c.baseline), el("td", {}, c.measure),
    el("td", { class: "num" }, fmt(c.baseline_mean)), el("td", { class: "num" }, fmt(c.system_mean)),
    el("td", { class: "num " + (c.diff > 0 ? "pos" : c.diff < 0 ? "neg" : "") }, signed(c.diff)),
    el("td", { class: "num" }, pval(c.p_value)), el("td", { class: "num" }, interval(c.randomization_ci_low, c.randomization_ci_high)),
    el("td", { class: "num holm" }, pval(c.p_holm)), el("td", { class: "num" }, `${fmt(c.ci_low)} – ${fmt(c.ci_high)}`), el("td", { class: "num" }, pval(c.t_test_p)),
    el("td", { class: "num" }, c.wins), el("td", { class: "num" }, c.ties), el("td", { class: "num" }, c.losses),
    el("td", { class: "num" }, c.order_stability === null ? "–" : c.order_stability.toFixed(3))));
  return el("table", { id: "comparisons" }, el("thead", {}, el("tr", {}, cols.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

// P(yes) beside the threshold it was compared with (yes iff p >= threshold), with digits
// enough that the printed p and threshold never contradict the sign.
function pYesText(p, t) {
  if (t === null || t === undefined) return `p=${p.toFixed(2)}`;
  let d = 2;
  while (d < 6 && p !== t && p.toFixed(d) === t.toFixed(d)) d += 1;
  return `p=${p.toFixed(d)} ${p >= t ? "≥" : "<"} ${t}`;
}

function verdictBadge(p) {
  if (p.source === "none") return el("span", { class: "badge unpooled" }, "not pooled");
  if (p.verdict === "unjudged") return el("span", { class: "badge unjudged" }, "unjudged");
  const extra = [p.source === "human" ? "human" : null, p.grade !== null && p.grade !== undefined ? `grade ${p.grade}` : null,
    p.p_yes !== null && p.p_yes !== undefined ? pYesText(p.p_yes, p.p_yes_threshold) : null].filter(Boolean).join(" · ");
  return el("span", { class: "badge " + p.verdict }, p.verdict, extra ? el("small", {}, " " + extra) : null);
}

function differingQueries(diff) {
  if (!diff.queries.length) return el("p", { class: "muted" }, "The systems score every query alike.");
  return diff.queries.map((q) => el("div", { class: "card dq", "data-qid": q.id },
    el("h3", {}, el("code", {}, q.id), " ", q.query, el("span", { class: "muted" }, ` · ${diff.measure} spread ${fmt(q.spread)}`)),
    el("div", { class: "dcols" }, q.systems.map((s, i) => el("div", { class: "dcol", "data-system": s.name },
      el("h4", { style: `color:${PALETTE[i % PALETTE.length]}` }, s.name, el("span", { class: "muted" }, ` ${diff.measure} ${fmt(s.value)}`)),
      s.passages.length ? el("ol", {}, s.passages.map((p) => el("li", { "data-rank": p.rank, "data-verdict": p.verdict },
        verdictBadge(p), el("span", { class: "muted" }, " " + p.docno),
        el("div", { class: "text" }, p.text),
        p.reason ? el("div", { class: "reason" }, p.reason) : null))) : el("p", { class: "muted" }, "no result for this query"),
      s.more ? el("p", { class: "muted" }, `… ${s.more} more`) : null)))));
}

// ---------------------------------------------------------------- the page
async function comparePage(jobId) {
  document.title = "judge · comparison " + jobId;
  const head = el("div", { class: "card", id: "job-head" });
  const body = el("div", { id: "compare-body" });
  $main.replaceChildren(el("h1", {}, "Comparison ", el("code", {}, jobId)), head, body);
  const base = `/v1/jobs/${encodeURIComponent(jobId)}`;

  function drawHead(job) {
    const actions = jobActions(job, base);
    const systems = job.options.systems || [];
    const links = job.status === "done" ? [
      el("a", { href: `${base}/report?format=html`, id: "report-html" }, "report.html"), " · ",
      el("a", { href: `${base}/report?format=md` }, "report.md"), " · ", el("a", { href: `${base}/report` }, "report.json"), " · ",
      el("a", { href: `${base}/results` }, "pooled verdicts"), " · ", el("a", { href: `${base}/results?format=qrels` }, "pool.qrels"),
      ...systems.flatMap((n) => [" · ", el("a", { href: `${base}/results?format=run&system=${encodeURIComponent(n)}` }, `${n}.run`)]),
      " · ", el("a", { href: `/jobs/${encodeURIComponent(jobId)}/review`, id: "review-link" }, "review the pooled verdicts"),
    ] : [];
    head.replaceChildren(...[
      el("div", { class: "filters" }, statusBadge(job.status), progressBar(job.queries_done, job.queries_total),
        el("span", { id: "progress-text" }, `pool: ${job.queries_done}/${job.queries_total} queries · ${job.passages_done}/${job.passages_total} pairs judged · ${job.unjudged} unjudged · ${job.rejected} rejected lines`),
        job.eta_s !== null && job.status === "running" ? el("span", { class: "muted" }, `ETA ${Math.round(job.eta_s)} s`) : null, ...actions),
      job.error ? el("p", { class: "err" }, job.error) : null,
      el("p", { class: "muted" }, `systems ${systems.join(", ")} (baseline ${systems[0]}) · mode ${job.options.mode}`,
        job.options.depth ? ` · depth ${job.options.depth}` : "", job.options.qrels ? " · human labels" : "", ` · created ${job.created}`,
        job.rejected ? [" · ", el("a", { href: `${base}/rejects` }, "rejects")] : null),
      links.length ? el("p", { class: "links" }, links) : null,
    ].filter(Boolean));
  }

  async function drawBody(job) {
    if (job.status !== "done") {
      body.replaceChildren(el("p", { class: "muted" }, job.status === "failed" || job.status === "cancelled"
        ? "No report: the comparison did not finish." : "The report appears when the pool is judged."));
      return;
    }
    const [report, diff] = await Promise.all([(await api(`${base}/report`)).json(), (await api(`${base}/differences`)).json()]);
    ALPHA = alphaOf(report);
    const primary = primaryOf(report);
    const extra = [];
    if (report.not_in_all_systems.length)
      extra.push(el("p", { class: "muted", id: "not-in-all" }, `Not in every system (left out of the paired tests): ${report.not_in_all_systems.join(", ")}`));
    if (report.warnings.length) extra.push(el("ul", { class: "warnings" }, report.warnings.map((w) => el("li", {}, w))));
    body.replaceChildren(
      verdictCard(report),
      el("h2", {}, "Pool"), poolCards(report),
      el("h2", {}, "Systems"), primary ? meansChart(report, primary) : null, meansTable(report),
      el("h2", {}, "Comparisons with the baseline"),
      el("p", { class: "muted" }, `Paired over the queries every system has. p: two-sided randomization test (seed ${report.conventions.seed}, ${report.conventions.resamples} resamples); Holm over all ${report.comparisons.length} comparisons; rows in bold: Holm p < 0.05. Order stability: share of redraws of the judge's verdicts from P(yes) in which the sign of the difference holds.`),
      comparisonsTable(report), ...extra,
      el("h2", {}, `Queries where the systems differ most (${diff.measure})`),
      el("div", { id: "differences" }, differingQueries(diff)));
  }

  const job = await (await api(base)).json();
  if (job.detail) { head.replaceChildren(el("p", { class: "err" }, String(job.detail))); return; }
  await followJob(base, job, drawHead, drawBody);
}
