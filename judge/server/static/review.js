// judge results viewer: the review page of a job ("/jobs/<id>/review"; "?mode=sample": the
// pairs the sample mode drew, each with its inclusion probability) and the agreement card
// of the job page. Plain JavaScript, no build step, nothing from the network; uses el/api/fmt
// of app.js (loaded after this file, called only once both are loaded).
//
// Keys: j / ArrowDown / ArrowRight next, k / ArrowUp / ArrowLeft previous, y / n (binary) or
// 0-3 (graded) pick a label, c focuses the comment, Enter saves (and moves on), Escape leaves
// the comment field.
"use strict";

const REVIEWER_KEY = "judge.reviewer";

function jobUrl(jobId, tail) { return `/v1/jobs/${encodeURIComponent(jobId)}${tail || ""}`; }

function labelText(scale, label) {
  if (label === null || label === undefined) return "–";
  if (scale === "binary") return label >= 1 ? "yes" : "no";
  return String(label);
}

// A figure of the agreement report: its value, or "undefined" with the reason on hover.
function figText(block, name, digits) {
  const v = block[name];
  if (v === null || v === undefined) {
    const why = (block.undefined || {})[name];
    return why ? el("span", { class: "muted", title: why }, "undefined") : "–";
  }
  return fmt(v, digits);
}

function kappaText(block) {
  const ci = block.kappa_ci ? ` [${fmt(block.kappa_ci[0], 2)}, ${fmt(block.kappa_ci[1], 2)}]` : "";
  return [figText(block, "kappa", 3), ci];
}

// ---------------------------------------------------------------- agreement card
// Rows: people; columns: the judge (0 = not relevant, 1 = relevant).
function confusionTable(conf) {
  if (!conf || !conf.matrix) return null;
  const names = ["no", "yes"];
  const head = el("tr", {}, el("th", {}, "people \\ judge"), names.map((l) => el("th", { class: "num" }, l)));
  const rows = conf.matrix.map((row, i) => el("tr", {}, el("th", {}, names[i]), row.map((n) => el("td", { class: "num" }, n))));
  return el("table", { class: "confusion" }, el("thead", {}, head), el("tbody", {}, rows));
}

function agreementBlock(title, block, id) {
  if (!block || !block.n) return el("div", { class: "agree-block", id }, el("h3", {}, title), el("p", { class: "muted" }, "No labelled items yet."));
  return el("div", { class: "agree-block", id },
    el("h3", {}, title),
    el("dl", { class: "figs" },
      el("dt", {}, "items"), el("dd", { "data-fig": "n" }, block.n),
      el("dt", {}, "Cohen's κ"), el("dd", { "data-fig": "kappa" }, kappaText(block)),
      el("dt", {}, "accuracy"), el("dd", { "data-fig": "accuracy" }, figText(block, "accuracy", 3)),
      el("dt", {}, "ROC AUC of P(yes)"), el("dd", { "data-fig": "auc" }, figText(block, "auc", 3))),
    confusionTable(block.confusion));
}

function agreementCard(data) {
  const parts = [el("h2", {}, "Agreement of the judge with people")];
  parts.push(agreementBlock("All reviewed items", data.overall, "agree-overall"));
  parts.push(agreementBlock("Audit set (drawn uniformly)", data.audit, "agree-audit"));
  const templates = Object.entries(data.per_template || {});
  if (templates.length > 1) for (const [tpl, block] of templates) parts.push(agreementBlock(`Template ${tpl}`, block, null));
  const pairs = (data.reviewers || []).map((p) => el("li", {}, `${p.a} and ${p.b}: κ `, figText(p, "kappa", 3),
    `, agreement ${fmt(p.agreement, 3)} on ${p.n} items`));
  parts.push(el("div", { id: "agree-hh" }, el("h3", {}, "Between reviewers"),
    pairs.length ? el("ul", {}, pairs) : el("p", { class: "muted" }, "No item labelled by two people yet.")));
  if (data.note) parts.push(el("p", { class: "note", id: "agree-note" }, data.note));
  return el("div", { class: "card agreement", id: "agreement" }, parts);
}

function conflictsCard(conflicts, scale) {
  const items = (conflicts || []).map((c) => el("li", { "data-query": c.query_id, "data-docno": c.docno },
    el("strong", {}, `${c.query_id} · ${c.docno}`), ": ",
    c.labels.map((l) => `${l.reviewer} ${labelText(l.scale || scale, l.label)}`).join(", ")));
  return el("div", { class: "card", id: "conflicts" },
    el("h2", {}, `Conflicts between reviewers (${items.length})`),
    items.length ? el("ul", {}, items) : el("p", { class: "muted" }, "None."));
}

// The calibrate action: refit the template's P(yes) threshold on the job's labels. "Check"
// reports the cross-validated kappa before and after (dry run); "Store" is enabled only when
// the refit helps beyond noise, else it stays disabled with the reason next to it.
function calibrateCard(jobId) {
  const out = el("div", { id: "calibrate-result", class: "muted" });
  const reason = el("div", { id: "calibrate-reason", class: "muted" });
  const name = el("input", { type: "text", id: "calibrate-name", placeholder: "name (optional)" });
  const button = el("button", { type: "button", id: "calibrate" }, "Check calibration from reviews");
  const apply = el("button", { type: "button", id: "calibrate-apply", disabled: "disabled" }, "Store as a named calibration");
  const post = async (extra) => {
    const body = Object.assign(name.value.trim() ? { name: name.value.trim() } : {}, extra);
    const resp = await api(jobUrl(jobId, "/calibrate"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const data = await resp.json();
    if (!resp.ok) { out.className = "err"; out.textContent = typeof data.detail === "string" ? data.detail : data.detail.map((d) => d.msg).join("; "); return null; }
    return data;
  };
  button.addEventListener("click", async () => {
    apply.disabled = true;
    reason.textContent = "";
    const data = await post({ dry_run: true });
    if (!data) return;
    const r = data.report || {};
    const band = r.kappa_gain_band || [null, null];
    out.className = "";
    out.textContent = `threshold ${fmt(data.previous_threshold, 3)} → ${fmt(data.threshold, 3)}; ` +
      `cross-validated κ ${fmt(r.cv_kappa_before, 3)} → ${fmt(r.cv_kappa_after, 3)} ` +
      `(gain ${fmt(r.kappa_gain, 3)}, noise band ${fmt(band[0], 3)} … ${fmt(band[1], 3)}) on ${r.n} labels, ${r.folds} folds, seed ${r.seed}.`;
    if (data.helps) {
      apply.disabled = false;
      apply.title = "";
      reason.textContent = "The refit helps beyond noise.";
    } else {
      apply.disabled = true;
      apply.title = data.verdict;
      reason.className = "err";
      reason.textContent = `Not offered: ${data.verdict}.`;
    }
  });
  apply.addEventListener("click", async () => {
    const data = await post({});
    if (!data) return;
    apply.disabled = true;
    out.className = "";
    reason.className = "muted";
    reason.textContent = data.stored ? `Stored "${data.name}". A job selects it with the option calibration=${data.name}.` : `Not stored: ${data.verdict}.`;
  });
  return el("div", { class: "card", id: "calibrate-card" }, el("h2", {}, "Calibrate the threshold"),
    el("p", { class: "muted" }, "Refits the template's P(yes) threshold on this job's labels (at least 30, both classes) with cross-validation. It can be stored under a name only when the held-out κ gain is above its noise band; the shipped default is not changed."),
    el("div", { class: "row filters" }, name, button, apply), out, reason);
}

function sampleCard(jobId, sampleMode) {
  const out = el("div", { id: "sample-result", class: "muted" });
  const n = el("input", { type: "number", id: "sample-n", min: "1", step: "any", value: "30", title: "pairs expected" });
  const design = el("select", { id: "sample-design" }, el("option", { value: "uniform" }, "uniform"), el("option", { value: "uncertainty" }, "uncertainty"));
  const seed = el("input", { type: "number", id: "sample-seed", min: "0", step: "1", value: "0", title: "seed" });
  const button = el("button", { type: "button", id: "sample-draw" }, "Draw a random sample");
  button.addEventListener("click", async () => {
    const body = { n: Number(n.value), design: design.value, seed: Number(seed.value) };
    const resp = await api(jobUrl(jobId, "/sample"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const data = await resp.json();
    if (!resp.ok) { out.className = "err"; out.textContent = typeof data.detail === "string" ? data.detail : data.detail.map((d) => d.msg).join("; "); return; }
    location.href = `/jobs/${encodeURIComponent(jobId)}/review?mode=sample`;
  });
  const other = sampleMode
    ? el("a", { href: `/jobs/${encodeURIComponent(jobId)}/review`, id: "to-queue" }, "back to the queue")
    : el("a", { href: `/jobs/${encodeURIComponent(jobId)}/review?mode=sample`, id: "to-sample" }, "review the drawn pairs");
  return el("div", { class: "card", id: "sample-card" }, el("h2", {}, "Sample mode"),
    el("p", { class: "muted" }, "Draws pairs with known inclusion probabilities (uniform, or where the judge is least sure). Labels on drawn pairs can correct the judge's figures without bias (this job's sample file: GET /v1/labels?format=sample&job=ID); labels chosen from the queue never enter an estimate. Drawing again records each pair's union probability. Label every drawn pair: an unlabelled one keeps the estimate from an interval."),
    el("div", { class: "row filters" }, n, design, seed, button), out, other);
}

async function loadAgreement(jobId) {
  const resp = await api(jobUrl(jobId, "/agreement"));
  return resp.ok ? resp.json() : null;
}

// The job page's agreement card (app.js calls it once the job is done).
async function agreementSection(jobId) {
  const data = await loadAgreement(jobId);
  if (!data) return el("div");
  return el("div", {}, el("p", {}, el("a", { href: `/jobs/${encodeURIComponent(jobId)}/review`, id: "review-link" }, "Review the judge's uncertain verdicts →")),
    agreementCard(data), conflictsCard(data.conflicts, data.scale), calibrateCard(jobId));
}

// ---------------------------------------------------------------- review page
function reviewStats(state) {
  const s = state.panel || {};
  const items = [
    stat("mAP (with human labels)", fmt(s.map)),
    stat("mAP (judge only)", fmt(s.map_judge)),
    stat("borderline verdicts", s.borderline === undefined ? "–" : s.borderline),
    stat("human labels in the figures", s.human === undefined ? "–" : s.human),
    stat("left in the queue", state.total),
  ];
  items[0].id = "stat-map"; items[2].id = "stat-borderline"; items[3].id = "stat-human"; items[4].id = "stat-queue";
  return el("div", { class: "cards side-stats", id: "review-stats" }, items);
}

async function reviewPage(jobId) {
  const sampleMode = new URLSearchParams(location.search).get("mode") === "sample";
  document.title = "judge · review " + jobId + (sampleMode ? " · sample" : "");
  const state = { items: [], pos: 0, total: 0, scale: "binary", pending: null, panel: null, reasonsOnRequest: false };
  const who = el("input", { id: "reviewer", type: "text", placeholder: "your name", autocomplete: "name" });
  who.value = localStorage.getItem(REVIEWER_KEY) || "";
  who.addEventListener("change", () => localStorage.setItem(REVIEWER_KEY, who.value.trim()));
  const msg = el("span", { class: "muted", id: "review-msg" });
  const current = el("div", { class: "card current", id: "current" });
  const list = el("ol", { class: "queue", id: "queue" });
  const side = el("aside", { class: "side", id: "side" });
  const comment = el("textarea", { id: "comment", rows: 2, placeholder: "comment (c)" });
  $main.replaceChildren(
    el("h1", {}, "Review ", el("a", { href: `/jobs/${encodeURIComponent(jobId)}` }, el("code", {}, jobId))),
    el("div", { class: "filters" }, el("label", {}, "Reviewer ", who), msg,
      el("span", { class: "muted keys" }, "j/k next/previous · y/n or 0-3 label · c comment · Enter save")),
    el("div", { class: "review" }, el("div", { class: "review-main" }, current, el("h2", {}, sampleMode ? "Drawn pairs" : "Queue"), list), side));

  function all() { return state.items; }

  function drawList() {
    const rows = all().map((it, i) => el("li", { class: (i === state.pos ? "at " : "") + (it.saved ? "saved" : "") + (it.audit ? " audit" : ""), "data-key": it.key, "data-pos": i },
      el("span", { class: "num" }, fmt(it.p_yes, 3)), " ", el("span", { class: "v-" + it.verdict }, it.verdict), " ",
      el("span", {}, `${it.query_id} #${it.rank}`), it.saved ? el("span", { class: "badge yes" }, labelText(state.scale, it.saved.label)) : null,
      it.audit ? el("span", { class: "badge" }, "audit") : null));
    for (const li of rows) li.addEventListener("click", () => { state.pos = Number(li.dataset.pos); draw(); });
    list.replaceChildren(...rows);
  }

  // A comparison's pair judged without a reason: the server asks the judge once, keeps the
  // reason and answers it (POST /v1/jobs/<id>/reasons); a failure is said here, with a retry.
  function wantsReason(it) { return state.reasonsOnRequest && !it.reason && it.verdict !== "unjudged"; }

  async function askReason(it) {
    if (!wantsReason(it) || it.reasonAsked) return;
    it.reasonAsked = true;
    it.reasonError = null;
    let resp = null, data = {};
    try {
      resp = await api(jobUrl(jobId, "/reasons"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query_id: it.query_id, docno: it.docno }) });
      data = await resp.json();
    } catch (e) { data = { detail: String(e.message || e) }; }
    if (resp && resp.ok) it.reason = data.reason;
    else it.reasonError = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail || `HTTP ${resp ? resp.status : "?"}`);
    if (all()[state.pos] === it) drawCurrent();
  }

  function reasonLine(it) {
    if (it.reason || !wantsReason(it)) return el("div", { class: "reason", id: "cur-reason" }, it.reason || "");
    if (it.reasonError) {
      const again = el("button", { type: "button", id: "reason-again" }, "Ask again");
      again.addEventListener("click", () => { it.reasonAsked = false; it.reasonError = null; drawCurrent(); });
      return el("div", { class: "reason err", id: "cur-reason", "data-error": "1" }, `No reason: ${it.reasonError} `, again);
    }
    if (!it.reasonAsked) setTimeout(() => askReason(it), 0);
    return el("div", { class: "reason muted", id: "cur-reason", "data-asking": "1" }, "Asking the judge for its reason…");
  }

  function drawCurrent() {
    const it = all()[state.pos];
    if (!it) {
      current.replaceChildren(el("p", { class: "muted", id: "queue-empty" }, sampleMode ? "No pair drawn yet: draw a sample (Sample mode, beside)." : "Nothing left to review in this job."));
      return;
    }
    const choices = state.scale === "binary" ? [["y", 1, "yes"], ["n", 0, "no"]] : [0, 1, 2, 3].map((g) => [String(g), g, String(g)]);
    const chosen = state.pending !== null ? state.pending : (it.saved ? it.saved.label : null);
    const buttons = choices.map(([key, value, text]) => {
      const b = el("button", { type: "button", class: "choice" + (chosen === value ? " chosen" : ""), "data-label": value }, `${text} (${key})`);
      b.addEventListener("click", () => { state.pending = value; drawCurrent(); });
      return b;
    });
    const save = el("button", { type: "button", class: "primary", id: "save" }, "Save (Enter)");
    save.addEventListener("click", () => saveCurrent());
    const pbar = el("div", { class: "pbar", title: `P(yes) ${fmt(it.p_yes, 3)}, threshold ${fmt(it.threshold, 3)}` },
      el("span", { class: "p" }), el("span", { class: "t" }));
    if (it.p_yes !== null && it.p_yes !== undefined) pbar.firstChild.style.width = `${Math.round(100 * it.p_yes)}%`;
    if (it.threshold !== null && it.threshold !== undefined) pbar.lastChild.style.left = `${(100 * it.threshold).toFixed(1)}%`;
    current.replaceChildren(
      el("div", { class: "muted" }, `${state.pos + 1} of ${all().length} · query ${it.query_id} · rank ${it.rank} · ${it.docno}`, it.audit ? " · audit item (drawn uniformly)" : "", it.inclusion ? ` · drawn with probability ${fmt(it.inclusion, 3)} (${it.design})` : "", it.systems ? ` · in ${it.systems.join(", ")}` : ""),
      el("h2", { id: "cur-query" }, it.query),
      el("div", { class: "passage", id: "cur-text" }, it.text === null || it.text === undefined ? "(text not available)" : it.text),
      el("div", { class: "judge-says", id: "cur-judge" },
        "Judge: ", el("span", { class: "v-" + it.verdict, id: "cur-verdict" }, it.verdict), it.grade !== null && it.grade !== undefined ? ` (grade ${it.grade})` : "",
        " · P(yes) ", el("strong", { id: "cur-p" }, fmt(it.p_yes, 3)), " vs threshold ", el("strong", { id: "cur-threshold" }, fmt(it.threshold, 3)), pbar),
      reasonLine(it),
      it.saved ? el("div", { class: "others", id: "cur-saved" }, `saved: ${labelText(state.scale, it.saved.label)} by ${it.saved.reviewer}`) : "",
      el("div", { class: "row choices" }, buttons, save),
      comment);
  }

  function drawSide(agreement) {
    const parts = [reviewStats(state)];
    if (state.panel && state.panel.error) parts.unshift(el("p", { class: "err", id: "review-error" }, state.panel.error));
    parts.push(sampleCard(jobId, sampleMode));
    if (agreement) parts.push(agreementCard(agreement), conflictsCard(agreement.conflicts, state.scale), calibrateCard(jobId));
    side.replaceChildren(...parts);
  }

  function draw() { drawList(); drawCurrent(); }

  async function loadQueue() {
    const resp = await api(jobUrl(jobId, new URLSearchParams(location.search).has("docno") ? "/queue?limit=1000" : "/queue?limit=200"));
    const data = await resp.json();
    if (!resp.ok) { current.replaceChildren(el("p", { class: "err" }, typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail))); return false; }
    if (data.signed_in) { who.value = data.signed_in; who.disabled = true; }
    state.scale = data.scale;
    state.reasonsOnRequest = !!data.reasons_on_request;
    state.total = data.total;
    state.items = data.items;
    state.pos = 0;
    // Opened from another page on one pair (?query_id=&docno=, e.g. the experiment page): start at it.
    const want = new URLSearchParams(location.search);
    const at = state.items.findIndex((it) => it.query_id === want.get("query_id") && it.docno === want.get("docno"));
    if (at >= 0) state.pos = at;
    if (sampleMode) {
      const drawn = await api(jobUrl(jobId, "/sample"));
      const sample = await drawn.json();
      if (!drawn.ok) { current.replaceChildren(el("p", { class: "err" }, JSON.stringify(sample.detail))); return false; }
      state.items = sample.items.map((it) => Object.assign({}, it, { saved: it.label === null ? null : { label: it.label, reviewer: "a reviewer" } }));
      state.total = sample.unlabelled;
    }
    return true;
  }

  async function loadPanel() {
    const [job, agreement] = await Promise.all([(await api(jobUrl(jobId))).json(), loadAgreement(jobId)]);
    state.panel = job.review || null;
    drawSide(agreement);
  }

  async function saveCurrent() {
    const it = all()[state.pos];
    if (!it) return;
    const label = state.pending !== null ? state.pending : (it.saved ? it.saved.label : null);
    if (label === null) { msg.className = "err"; msg.textContent = state.scale === "binary" ? "pick y or n first" : "pick a grade 0-3 first"; return; }
    const body = { query_id: it.query_id, docno: it.docno, label, comment: comment.value.trim() || null, audit: !!it.audit };
    if (who.value.trim()) body.reviewer = who.value.trim();
    const resp = await api(jobUrl(jobId, "/labels"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const data = await resp.json();
    if (!resp.ok) { msg.className = "err"; msg.textContent = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail); return; }
    msg.className = "muted";
    msg.textContent = `saved ${labelText(state.scale, label)} for ${it.query_id} #${it.rank} as ${data.label.reviewer}`;
    it.saved = data.label;
    state.pending = null;
    comment.value = "";
    state.total = sampleMode ? all().filter((x) => !x.saved).length : data.review.queue;
    state.panel = data.review;
    // Walk the queue as it was fetched (its audit items keep their place); a reload fetches it anew.
    const next = all().findIndex((x, i) => i > state.pos && !x.saved);
    if (next >= 0) state.pos = next;
    else if (state.items.every((x) => x.saved) && state.total > 0) await loadQueue();
    draw();
    await loadPanel();
    document.body.dataset.saved = String(Number(document.body.dataset.saved || 0) + 1);
  }

  function move(step) {
    const n = all().length;
    if (!n) return;
    state.pos = Math.max(0, Math.min(n - 1, state.pos + step));
    state.pending = null;
    comment.value = "";
    draw();
    const at = list.querySelector("li.at");
    if (at) at.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(ev.target.tagName);
    if (typing) {
      if (ev.key === "Escape") { ev.target.blur(); ev.preventDefault(); }
      else if (ev.key === "Enter" && ev.target === comment && !ev.shiftKey) { ev.preventDefault(); saveCurrent(); }
      return;
    }
    const key = ev.key;
    if (key === "j" || key === "ArrowDown" || key === "ArrowRight") move(1);
    else if (key === "k" || key === "ArrowUp" || key === "ArrowLeft") move(-1);
    else if (key === "c") { comment.focus(); }
    else if (key === "Enter") saveCurrent();
    else if (state.scale === "binary" && (key === "y" || key === "n")) { state.pending = key === "y" ? 1 : 0; drawCurrent(); }
    else if (state.scale === "graded" && /^[0-3]$/.test(key)) { state.pending = Number(key); drawCurrent(); }
    else return;
    ev.preventDefault();
  });

  if (await loadQueue()) draw();
  await loadPanel();
  document.body.dataset.ready = "1";
}
