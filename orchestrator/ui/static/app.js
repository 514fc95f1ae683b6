// yolo-orch dashboard: renders the page the server named in <body data-page>, from its JSON API.
// Charts: plotly.js, served by the dashboard from the plotly package (offline). Every chart's <div>
// carries data-points (the epochs it plots), which the browser tests read.
"use strict";

const body = document.body;
const main = document.getElementById("main");
const POLL_MS = 500;  // the pause between two long polls of a live run

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : v ?? "-");
const when = (t) => (t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "-");
const dur = (s) => (s == null ? "-" : s < 120 ? `${s.toFixed(0)} s` : `${(s / 60).toFixed(1)} min`);
const headline = (r) => (r.headline && r.headline.length ? r.headline.map(([k, v]) => `${k} ${fmt(v)}`).join(", ") : "-");

function table(headers, rows, cls = "") {
  return el("table", { class: cls }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", r.attrs || {}, r.cells.map((c) => el("td", {}, c))))));
}

function damaged(part, what) {
  return part && part.damaged ? el("p", { class: "damaged" }, `${what}: damaged (${part.damaged})`) : null;
}

// ---------------------------------------------------------------- charts

// One panel per scale: the gradient norms (often over 1,000) and the share of clipped steps (0-1) would
// flatten the losses (about 1-5) drawn on their axis.
const GRADIENTS = ["train/grad_norm", "train/grad_norm_max"];
const CLIPPED = "train/clip_fraction";
const GROUPS = [
  ["losses", (k) => (k.startsWith("train/") || k.startsWith("val/")) && !GRADIENTS.includes(k) && k !== CLIPPED],
  ["metrics", (k) => k.startsWith("metrics/")], ["learning rate", (k) => k.startsWith("lr/")],
  ["gradient norm", (k) => GRADIENTS.includes(k)], ["clipped steps", (k) => k === CLIPPED]];

// plotly reads <a href>, <b>... in names and titles as markup: a metric name from a run folder is text
const plain = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function chart(div, title, series) {
  const traces = series.map((s) => ({ x: s.x, y: s.y, name: plain(s.name), mode: "lines+markers",
    line: s.dash ? { dash: "dot" } : {} }));
  const points = Math.max(0, ...series.map((s) => s.y.filter((v) => v !== null && v !== undefined).length));
  div.setAttribute("data-points", String(points));
  div.setAttribute("data-series", String(series.length));
  Plotly.react(div, traces, { title: { text: plain(title) }, margin: { t: 40, r: 10, b: 40, l: 50 }, height: 300,
    xaxis: { title: { text: "epoch" } }, legend: { orientation: "h" } }, { displaylogo: false, responsive: true });
}

function runCharts(holder, curves, prefix = "") {
  for (const [title, keep] of GROUPS) {
    const keys = Object.keys(curves).filter((k) => k !== "epoch" && keep(k));
    if (!keys.length) continue;
    let div = holder.querySelector(`[data-chart="${title}"]`);
    if (!div) holder.append((div = el("div", { class: "chart", "data-chart": title })));
    chart(div, prefix + title, keys.map((k) => ({ x: curves.epoch, y: curves[k], name: k })));
  }
}

// ---------------------------------------------------------------- runs

async function runsPage() {
  const params = new URLSearchParams(location.search);
  const data = await getJSON(`/api/runs?${params}`);
  const form = el("form", { class: "filters", method: "get" },
    ["name", "devices", "tags"].map((k) => el("input", { name: k, placeholder: k, value: params.get(k) || "" })),
    el("select", { name: "state" }, ["", "queued", "running", "finished", "failed", "killed", "stalled", "pruned"]
      .map((s) => el("option", { value: s, ...(params.get("state") === s ? { selected: "" } : {}) }, s || "any state"))),
    el("select", { name: "task" }, ["", ...data.tasks]
      .map((s) => el("option", { value: s, ...(params.get("task") === s ? { selected: "" } : {}) }, s || "any task"))),
    el("button", { type: "submit" }, "filter"));
  const rows = data.runs.map((r) => ({ attrs: { "data-run": r.id, class: `state-${r.state}` }, cells: [
    el("input", { type: "checkbox", value: r.id, class: "pick" }), el("a", { href: `/run/${r.id}` }, r.id), r.job,
    el("span", { class: `state state-${r.state}` }, r.state), r.task || "-", r.devices || "-",
    `${r.epochs_done ?? "-"}/${r.epochs ?? "-"}`, headline(r), dur(r.wall_s),
    r.study ? el("a", { href: `/sweep/${r.study}` }, `${r.study} #${r.trial}`) : "", when(r.created_at)] }));
  const compare = el("button", { onclick: () => {
    const ids = [...document.querySelectorAll(".pick:checked")].map((c) => c.value);
    if (ids.length >= 2) location.href = `/compare?ids=${ids.join(",")}`;
  } }, "compare selected");
  const pages = Math.max(1, Math.ceil(data.total / data.size));
  const nav = (p) => { params.set("page", p); return `/?${params}`; };
  main.replaceChildren(form,
    el("p", { id: "count", "data-total": data.total }, `${data.total} runs; page ${data.page + 1} of ${pages} `,
      data.page > 0 ? el("a", { href: nav(data.page - 1) }, "newer") : "", " ",
      data.page + 1 < pages ? el("a", { href: nav(data.page + 1) }, "older") : "", " ", compare),
    table(["", "run", "job", "state", "task", "devices", "epochs", "result", "wall", "sweep", "created"], rows, "runs"),
    data.studies.length ? el("section", {}, el("h2", {}, "sweeps"),
      el("ul", {}, data.studies.map((s) => el("li", {}, el("a", { href: `/sweep/${s.study}` }, s.study),
        ` (${s.trials} trials)`)))) : "");
}

// ---------------------------------------------------------------- one run

function planSection(resolved) {
  if (!resolved || resolved.damaged) return damaged(resolved, "job.resolved.yaml") || el("p", {}, "no plan yet");
  const s = (resolved.plan || {}).scaling || {};
  const keys = [...new Set([...Object.keys(s.passed || {}), ...Object.keys(s.effective || {})])];
  return el("section", { id: "plan" }, el("h2", {}, `plan: ${s.devices ?? ""}, policy ${s.policy ?? "-"}`),
    table(["value", "passed to Ultralytics", "what Ultralytics applies"],
      keys.map((k) => ({ cells: [k, fmt((s.passed || {})[k]), fmt((s.effective || {})[k])] })), "plan"),
    el("h3", {}, "why"), el("ul", { class: "reasons" }, (s.reasons || []).map((r) => el("li", {}, r))),
    el("h3", {}, "warnings"), el("ul", { class: "warnings" }, (s.warnings || []).map((w) => el("li", {}, w))));
}

// where the run's results went next: W&B, MLflow, TensorBoard (summary.json) and the exported files (its
// `exports`, each compared with best.pt on the val split); nothing when the run used none of them
function trackingSection(d) {
  const summary = d.summary && !d.summary.damaged ? d.summary : {};
  const resolved = d.resolved && !d.resolved.damaged ? d.resolved : {};
  const lines = [];
  if (resolved.wandb_mode && resolved.wandb_mode !== "disabled") lines.push(`W&B: ${resolved.wandb_mode}`);
  if (summary.mlflow) lines.push(`MLflow: run ${summary.mlflow.run_id || "-"} in ${summary.mlflow.tracking_uri}`);
  if (summary.tensorboard) lines.push(`TensorBoard: ${summary.tensorboard.folder} (epochs logged: ` +
    `${summary.tensorboard.epochs ?? "-"}; tensorboard --logdir ${summary.tensorboard.folder})`);
  const warnings = ["mlflow", "tensorboard"].flatMap((k) => ((summary[k] || {}).warnings || []).map((w) => `${k}: ${w}`));
  const exports = Object.values(summary.exports || {});
  if (!lines.length && !exports.length) return "";
  const listed = new Set(Array.isArray(d.files) ? d.files.map((f) => f.path) : []);  // a folder (openvino) is not
  const inRun = (file) => (file && file.startsWith(`${d.run_dir}/`) ? file.slice(d.run_dir.length + 1) : null);
  const rows = exports.map((x) => {
    const relative = inRun(x.file);
    const verdict = x.error ? `failed: ${x.error}` : x.compared === false ? "not compared: best.pt scores 0"
      : x.ok ? "within the tolerance" : "BEYOND the tolerance";
    return { attrs: { "data-format": x.format, class: x.ok ? "" : "export-bad" }, cells: [x.format,
      listed.has(relative) ? el("a", { href: `/files/${d.run.id}/${relative}` }, relative) : relative || x.file || "-",
      x.size_bytes == null ? "-" : `${(x.size_bytes / 1e6).toFixed(1)} MB`, fmt(x.difference), fmt(x.tolerance), verdict] };
  });
  return el("section", { id: "tracking" }, el("h2", {}, "tracking and export"),
    el("ul", {}, lines.map((line) => el("li", {}, line))),
    warnings.length ? el("ul", { class: "warnings" }, warnings.map((w) => el("li", {}, w))) : "",
    exports.length ? table(["format", "file", "size", "largest val metric difference from best.pt", "tolerance",
      "verdict"], rows, "exports") : "");
}

function deviceSection(d) {
  const plan = (d.resolved && d.resolved.plan) || {};
  const env = d.env && !d.env.damaged ? d.env : {};
  const rows = [["devices", plan.devices], ["world size", plan.world_size], ["launcher", plan.launcher],
    ...Object.entries(env).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : fmt(v)])];
  return el("section", { id: "devices" }, el("h2", {}, "devices and environment"), damaged(d.env, "env.json"),
    table(["", ""], rows.map(([k, v]) => ({ cells: [k, String(v ?? "-")] }))));
}

function timelineSection(d) {
  const events = d.events && !d.events.damaged ? d.events.timeline : [];
  const notes = (d.run.notes || []).map((n) => ({ time: n.time, event: "note", text: n.text }));
  const resumes = (((d.resolved || {}).resumes) || []).map((r) => ({ time: r.time, event: "resume", ...r }));
  const items = [...events, ...notes, ...resumes].sort((a, b) => (a.time || 0) - (b.time || 0));
  const describe = (e) => Object.entries(e).filter(([k]) => !["time", "event"].includes(k))
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : fmt(v)}`).join(" ");
  return el("section", { id: "timeline" }, el("h2", {}, "timeline"), damaged(d.events, "events.jsonl"),
    el("ul", {}, items.map((e) => el("li", { class: `event-${e.event}` }, `${when(e.time)}  ${
      e.event === "train_start" && e.start_epoch > 0 ? `resumed at epoch ${e.start_epoch + 1}` : e.event}  `,
      el("span", { class: "dim" }, describe(e).slice(0, 300))))));
}

function filesSection(d) {
  if (!Array.isArray(d.files)) return damaged(d.files, "run folder") || el("p", {}, "no files");
  return el("section", { id: "files" }, el("h2", {}, "files"), el("ul", {}, d.files.map((f) =>
    el("li", {}, el("a", { href: `/files/${d.run.id}/${f.path}` }, f.path), ` ${f.bytes} bytes`))));
}

async function runPage() {
  const id = body.dataset.run;
  let d;
  try { d = await getJSON(`/api/run/${encodeURIComponent(id)}`); } catch (e) {
    main.replaceChildren(el("p", { class: "damaged" }, String(e))); return;
  }
  const r = d.run;
  const charts = el("section", { id: "curves" }, el("h2", {}, "curves"));
  main.replaceChildren(
    el("section", { id: "head" }, el("h1", {}, `${r.job} / ${r.id}`),
      el("p", {}, el("span", { class: `state state-${r.state}`, id: "state" }, r.state),
        `  ${r.task || ""} on ${r.devices || "-"}, epochs ${r.epochs_done ?? "-"}/${r.epochs ?? "-"}, ${headline(r)}, `,
        `wall ${dur(r.wall_s)}`, r.study ? el("a", { href: `/sweep/${r.study}` }, `  sweep ${r.study} #${r.trial}`) : ""),
      el("p", { class: "dim" }, d.run_dir)),
    charts, planSection(d.resolved), trackingSection(d), deviceSection(d), timelineSection(d),
    el("section", { id: "log" }, el("h2", {}, "train.log (tail)"), damaged(d.log, "train.log"),
      el("pre", {}, typeof d.log === "string" ? d.log.split("\n").slice(-200).join("\n") : "no log")),
    filesSection(d));
  const draw = (dd) => {
    if (dd.events && dd.events.damaged) charts.append(damaged(dd.events, "events.jsonl"));
    else runCharts(charts, dd.events.curves);
  };
  draw(d);
  let live = d;
  while (live.run.active) {  // live: the server answers when an epoch more is recorded (or the run ends)
    const seen = ((live.events || {}).curves || {}).epoch || [];
    live = await getJSON(`/api/run/${encodeURIComponent(id)}?after=${seen.length}`);
    draw(live);
    document.getElementById("state").textContent = live.run.state;
    await new Promise((done) => setTimeout(done, POLL_MS));
  }
}

// ---------------------------------------------------------------- compare

function flatten(value, prefix = "", out = {}) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else out[prefix] = JSON.stringify(value);
  return out;
}

async function comparePage() {
  const d = await getJSON(`/api/compare?ids=${encodeURIComponent(body.dataset.ids)}`);
  const runs = d.runs;
  const curvesOf = (x) => (x.events && x.events.curves) || { epoch: [] };
  const keys = [...new Set(runs.flatMap((x) => Object.keys(curvesOf(x)).filter((k) => k !== "epoch")))].sort();
  const pick = el("select", { id: "metric" }, keys.map((k) => el("option", { value: k }, k)));
  const best = keys.find((k) => k.includes("mAP50-95")) || keys.find((k) => k.startsWith("metrics/")) || keys[0];
  if (best) pick.value = best;
  const div = el("div", { class: "chart", id: "overlay" });
  const draw = () => chart(div, pick.value, runs.map((x) => ({ x: curvesOf(x).epoch, y: curvesOf(x)[pick.value] || [],
    name: `${x.run.job}/${x.run.id}` })));
  pick.addEventListener("change", draw);
  const flat = runs.map((x) => flatten({ job: (x.resolved || {}).job, train_args: ((x.resolved || {}).plan || {}).train_args }));
  const all = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  const rows = all.map((k) => {
    const values = flat.map((f) => f[k] ?? "-");
    const differs = new Set(values).size > 1;
    return { differs, attrs: { class: differs ? "differs" : "" }, cells: [k, ...values] };
  }).sort((a, b) => b.differs - a.differs);  // the differences first
  main.replaceChildren(el("h1", {}, `compare ${runs.length} runs`),
    el("p", {}, runs.map((x) => el("a", { href: `/run/${x.run.id}`, class: "runlink" }, `${x.run.job}/${x.run.id} `))),
    pick, div, el("h2", {}, "resolved jobs (differences highlighted)"),
    el("label", {}, el("input", { type: "checkbox", id: "only-diff", onchange: (e) =>
      document.querySelectorAll("table.jobs tbody tr:not(.differs)").forEach((tr) => {
        tr.style.display = e.target.checked ? "none" : ""; }) }), " only the differences"),
    table(["field", ...runs.map((x) => x.run.id)], rows, "jobs"));
  if (keys.length) draw();
}

// ---------------------------------------------------------------- sweep

async function sweepPage() {
  const study = body.dataset.study;
  const d = await getJSON(`/api/sweep/${encodeURIComponent(study)}`);
  const summary = d.summary || {};
  const objective = ((summary.objectives || [])[0] || {}).metric || "metrics/mAP50-95(B)";
  const bestNumber = summary.best ? summary.best.number : null;
  const rows = d.trials.map((t) => {
    const verdict = (t.resolved || {}).sweep || {};
    const record = (summary.trials || []).find((x) => x.number === t.run.trial) || {};
    return { attrs: { class: t.run.trial === bestNumber ? "best" : "", "data-trial": t.run.trial }, cells: [
      String(t.run.trial), el("a", { href: `/run/${t.run.id}` }, t.run.id),
      el("span", { class: `state state-${t.run.state}` }, t.run.state),
      fmt((record.values || [])[0] ?? (t.run.metrics || {})[objective]),
      JSON.stringify(verdict.params || record.params || {}), `${t.run.epochs_done ?? "-"}/${t.run.epochs ?? "-"}`] };
  });
  const div = el("div", { class: "chart", id: "trials-chart" });
  main.replaceChildren(el("h1", {}, `sweep ${study}`),
    el("p", {}, `objective ${objective}; ${d.trials.length} trials`, summary.best ? `; best: trial ${bestNumber} ` +
      `(${fmt(summary.best.value)})` : "", summary.best_yaml ? el("a", { href: `/best/${study}`, id: "best-yaml" },
      "  best.yaml") : ""),
    div, table(["trial", "run", "state", "objective", "parameters", "epochs"], rows, "trials"));
  chart(div, `${objective} per epoch (pruned: dotted)`, d.trials.map((t) => {
    const c = (t.events && t.events.curves) || { epoch: [] };
    return { x: c.epoch, y: c[objective] || [], name: `#${t.run.trial}`, dash: t.run.state === "pruned" };
  }));
}

const PAGES = { runs: runsPage, run: runPage, compare: comparePage, sweep: sweepPage };
PAGES[body.dataset.page]().catch((e) => main.replaceChildren(el("p", { class: "damaged" }, String(e))));
