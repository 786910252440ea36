// The evaluations page: runs of evaluation configs side by side (GET /v1/eval/results), a
// table with a column per metric and a bar chart per metric. The filters live in the
// address, so a comparison can be shared.

import { api, query } from "./api.js";
import { barChart } from "./charts.js";
import { h, replace, uid } from "./dom.js";
import * as fmt from "./format.js";
import { liveIndicator, poll, showFailure, stateBadge } from "./ui.js";

// results change when a run ends: no need to ask often
const EVERY_MS = 10000;
const LIMITS = ["50", "200", "1000"];
const COLOURS = 8; // .series-0 .. .series-7 in app.css
const LOWER_IS_BETTER = /loss|perplexity|error|stderr/i;
// counts (tokens scored, examples, examples left out), not scores: shown, never ranked
const COUNTS = /(^|\/)(eval_tokens|examples|left_out|n_samples|sample_len|\w+_count)$/i;
// what the API accepts (rota.server.api.eval), checked here to say so at the field
const CHECKS = {
  name: [/^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/, "A config name: letters, digits, _ . and -."],
  task: [/^[^\s,/]{1,200}$/, "One task name, without spaces, commas or slashes."],
};
const RUN_HEADS = [["c-id", "Job"], ["c-name", "Name"], ["c-model", "Model"], ["c-harness", "Harness"],
  ["c-state", "State"], ["c-when", "When"], ["c-commit", "Commit"]];

export const lowerIsBetter = (metric) => LOWER_IS_BETTER.test(metric);
export const isCount = (metric) => COUNTS.test(metric);
/** How a metric is ranked, in words: "lower is better", or "a count, not ranked". */
export const direction = (metric) => isCount(metric) ? "a count, not ranked"
  : `${lowerIsBetter(metric) ? "lower" : "higher"} is better`;

/** A number for people: integers whole, others to 4 significant digits (0.5, 0.6341). */
export function num(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "–";
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
}

/**
 * The standard error reported beside a metric, as rota.eval's lm-eval reader names it:
 * arc_easy/acc -> arc_easy/acc_stderr, gsm8k/exact_match/strict-match ->
 * gsm8k/exact_match_stderr/strict-match. Null for a stderr itself.
 */
export function stderrName(metric) {
  const parts = metric.split("/");
  if (parts.length < 2 || parts[1].endsWith("_stderr")) return null;
  parts[1] += "_stderr";
  return parts.join("/");
}

/** The table's metric columns, sorted: [{name, err}], a stderr folded into its metric's. */
export function metricColumns(runs) {
  const names = new Set(runs.flatMap((r) => Object.keys(r.metrics)));
  const folded = new Set([...names].map(stderrName).filter((e) => e && names.has(e)));
  return [...names].filter((n) => !folded.has(n)).sort()
    .map((name) => ({ name, err: folded.has(stderrName(name)) ? stderrName(name) : null }));
}

/** The best of the values, or null when there is nothing to choose (fewer than two differ). */
export function bestOf(values, lower) {
  const vs = values.filter((v) => typeof v === "number" && Number.isFinite(v));
  const best = lower ? Math.min(...vs) : Math.max(...vs);
  return new Set(vs).size > 1 ? best : null;
}

// --- filters in the address -------------------------------------------------------------

function readFilters(q) {
  return { name: q.get("name") || "", model: q.get("model") || "", task: q.get("task") || "",
    limit: LIMITS.includes(q.get("limit")) ? q.get("limit") : LIMITS[0] };
}

function writeFilters(f) {
  const qs = query({ ...f, limit: f.limit === LIMITS[0] ? "" : f.limit });
  history.replaceState(null, "", `#/evals${qs}`);
}

/** Is the field's value one the API accepts? If not, the field says why. */
function checked(key, { input, error }) {
  const value = input.value.trim();
  const [pattern, words] = CHECKS[key] || [];
  const bad = Boolean(value && pattern && !pattern.test(value));
  input.setAttribute("aria-invalid", String(bad));
  error.textContent = bad ? words : "";
  return !bad;
}

/** The filter form: an input per filter with the values seen so far as suggestions. */
function filterForm(f, apply) {
  const fields = {};
  const lists = {};
  const form = h("form", { class: "filters", role: "search" });
  for (const [key, label, hint] of [["name", "Config", "any config"], ["model", "Model", "any model"],
    ["task", "Task", "any task"]]) {
    lists[key] = h("datalist", { id: uid(`ev-${key}-list`) });
    const error = h("p", { id: uid(`ev-${key}-error`), class: "field-error", role: "alert" });
    fields[key] = { error, input: h("input", { id: `ev-${key}`, name: key, type: "search", value: f[key],
      list: lists[key].id, autocomplete: "off", spellcheck: "false", placeholder: hint,
      "aria-describedby": error.id }) };
    form.append(h("div", { class: "field inline ev-filter" },
      h("label", { for: `ev-${key}` }, label), fields[key].input, lists[key], error));
  }
  const limit = h("select", { id: "ev-limit", name: "limit" },
    LIMITS.map((n) => h("option", { value: n, selected: n === f.limit }, `newest ${n}`)));
  form.append(h("div", { class: "field inline" }, h("label", { for: "ev-limit" }, "Runs"), limit),
    h("button", { type: "submit", class: "btn btn-small" }, "Apply"),
    h("button", { type: "button", class: "btn btn-small btn-quiet", onclick: () => {
      for (const { input } of Object.values(fields)) input.value = "";
      read();
    } }, "Clear"));

  /** Take the form's values, when each is one the API accepts. */
  function read() {
    if (!Object.entries(fields).map(([key, field]) => checked(key, field)).every(Boolean)) return;
    const before = JSON.stringify(f);
    for (const key of Object.keys(fields)) f[key] = fields[key].input.value.trim();
    f.limit = limit.value;
    if (JSON.stringify(f) !== before) apply(); // Enter, then leaving the field: once
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    read();
  });
  form.addEventListener("change", read);

  const seen = { name: new Set(), model: new Set(), task: new Set() };
  return {
    el: form,
    /** Offer the names, models and tasks of these runs, with those offered before. */
    suggest(runs) {
      for (const r of runs) {
        if (r.name) seen.name.add(r.name);
        if (r.model) seen.model.add(r.model);
        for (const m of Object.keys(r.metrics)) seen.task.add(m.split("/")[0]);
      }
      for (const [key, list] of Object.entries(lists)) {
        // only when there is something new: an open list of suggestions stays put
        if (list.children.length === seen[key].size) continue;
        replace(list, [...seen[key]].sort().map((v) => h("option", { value: v })));
      }
    },
  };
}

// --- the table ----------------------------------------------------------------------------

function metricHead(col) {
  const lower = lowerIsBetter(col.name);
  const [task, ...rest] = col.name.split("/");
  return h("th", { scope: "col", class: "num c-metric", "data-metric": col.name,
    title: `${col.name}: ${direction(col.name)}${col.err ? `; ± ${col.err}` : ""}` },
  `${task}/`, h("wbr"), rest.join("/"),
  isCount(col.name) ? null : h("span", { class: "dir", "aria-hidden": "true" }, lower ? " ↓" : " ↑"),
  h("span", { class: "sr-only" }, ` (${direction(col.name)})`));
}

function runCells(r) {
  const when = r.ended_at ?? r.created_at;
  const times = `submitted ${fmt.stamp(r.created_at)}${r.ended_at ? ` · ended ${fmt.stamp(r.ended_at)}` : ""}`;
  return [
    h("a", { href: `#/jobs/${r.id}`, class: "job-link" }, `#${r.id}`),
    r.name,
    r.model ? h("span", { class: "ev-model" }, r.model) : "–",
    r.harness || "–",
    stateBadge(r.state),
    h("span", { title: times }, fmt.ago(when)),
    r.git_commit ? h("code", { title: r.git_commit }, r.git_commit.slice(0, 7)) : "–",
  ];
}

function metricCell(r, col, best) {
  const v = r.metrics[col.name];
  const err = col.err ? r.metrics[col.err] : undefined;
  const isBest = best !== null && v === best;
  return h("td", { class: ["num c-metric", isBest && "best"], "data-metric": col.name },
    isBest ? h("span", { class: "best-mark", "aria-hidden": "true" }, "★ ") : null,
    num(v),
    err !== undefined ? h("span", { class: "err" }, ` ± ${num(err)}`) : null,
    isBest ? h("span", { class: "sr-only" }, " (best)") : null);
}

function paintTable(table, runs, cols, bests) {
  replace(table,
    h("caption", { class: "sr-only" }, "Evaluation runs, newest first, with a column per metric"),
    h("thead", null, h("tr", null,
      RUN_HEADS.map(([cls, label]) => h("th", { scope: "col", class: cls }, label)),
      cols.map(metricHead))),
    h("tbody", null, runs.map((r) => h("tr", { "data-run": String(r.id) },
      runCells(r).map((c, i) => h(i === 0 ? "th" : "td", { class: RUN_HEADS[i][0], scope: i === 0 ? "row" : null }, c)),
      cols.map((col, i) => metricCell(r, col, bests[i]))))));
}

// --- the charts ---------------------------------------------------------------------------

function runLabel(r) {
  return `#${r.id} ${r.model || r.name}`;
}

function metricChart(runs, col, best, colourOf) {
  const items = runs.filter((r) => typeof r.metrics[col.name] === "number").map((r) => {
    const value = r.metrics[col.name];
    const err = col.err ? r.metrics[col.err] : undefined;
    const text = num(value) + (err !== undefined ? ` ± ${num(err)}` : "");
    return { value, err, text, label: runLabel(r), best: best !== null && value === best,
      cls: `series-${colourOf(r.model)}`, title: `job ${r.id} · ${r.name} · ${r.model || "no model"}: ${text}` };
  });
  const dir = direction(col.name);
  const alt = `${col.name}, ${dir}: ` +
    items.map((i) => `${i.label} ${i.text}${i.best ? " (best)" : ""}`).join("; ");
  const headId = uid("ev-chart");
  return h("figure", { class: "card ev-chart", "data-metric": col.name, "aria-labelledby": headId },
    h("h2", { id: headId, class: "ev-chart-title" }, h("span", null, col.name),
      h("span", { class: "muted small" }, dir)),
    barChart(items, { label: alt }));
}

/** A colour per model (the same in every chart), in the order of the models' names. */
function palette(runs) {
  const models = [...new Set(runs.map((r) => r.model || ""))].sort();
  const index = new Map(models.map((m, i) => [m, i % COLOURS]));
  return { models, colourOf: (model) => index.get(model || "") };
}

function paintCharts(box, runs, cols, bests) {
  const { models, colourOf } = palette(runs);
  const legend = h("ul", { class: "ev-legend", "aria-label": "Colours by model" },
    models.map((m) => h("li", null, h("span", { class: ["key", `series-${colourOf(m)}`], "aria-hidden": "true" }),
      m || "no model")));
  replace(box, legend, h("div", { class: "ev-charts" },
    cols.map((col, i) => metricChart(runs, col, bests[i], colourOf))));
}

// --- the page -----------------------------------------------------------------------------

function emptyText(f) {
  const filtered = f.name || f.model || f.task;
  return [filtered ? "No evaluation runs match these filters. " : "No evaluation results yet. ",
    "Run an evaluation with ", h("code", null, "rota eval submit CONFIG.yaml"),
    "; each run shows here with its metrics once it reports them."];
}

export function renderEvals(root, q) {
  const f = readFilters(q);
  let generation = 0; // answers to requests made before a filter change are dropped
  let shown = null; // the answer on screen, as text: a refresh that changes nothing repaints nothing
  const live = liveIndicator();
  const summary = h("p", { class: "muted", id: "evals-summary" });
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const empty = h("p", { class: "empty", hidden: true });
  const table = h("table", { class: "evals", "aria-describedby": "evals-summary" });
  const wrap = h("div", { class: "table-wrap evals-wrap", tabindex: "0", role: "region",
    "aria-label": "Runs and their metrics (scrolls)" }, table);
  const charts = h("section", { class: "ev-chart-box", "aria-label": "A chart per metric" });
  const filters = filterForm(f, () => {
    generation += 1;
    writeFilters(f);
    refresh();
  });
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Evaluations"), live.el),
    filters.el, error, summary, empty, wrap, charts));

  function paint(runs) {
    const cols = metricColumns(runs);
    const bests = cols.map((c) => isCount(c.name) ? null
      : bestOf(runs.map((r) => r.metrics[c.name]), lowerIsBetter(c.name)));
    replace(empty, emptyText(f));
    empty.hidden = runs.length > 0;
    wrap.hidden = charts.hidden = summary.hidden = runs.length === 0;
    summary.textContent = `${runs.length} run${runs.length === 1 ? "" : "s"} · ${cols.length} ` +
      `metric${cols.length === 1 ? "" : "s"}${String(runs.length) === f.limit ? ` · the newest ${f.limit}` : ""}` +
      " · ★ marks the best value of each metric";
    paintTable(table, runs, cols, bests);
    paintCharts(charts, runs, cols, bests);
  }

  async function refresh() {
    const gen = generation;
    try {
      const answer = await api(`/v1/eval/results${query(f)}`);
      if (gen !== generation) return;
      live.ok();
      error.hidden = true;
      filters.suggest(answer.runs);
      const text = `${query(f)} ${JSON.stringify(answer.runs)}`;
      if (text !== shown) paint(answer.runs);
      shown = text;
    } catch (e) {
      if (gen === generation) showFailure(e, live, error);
    }
  }
  if (f.name || f.model || f.task) {
    // suggest what else there is, once
    api(`/v1/eval/results${query({ limit: 200 })}`).then((a) => filters.suggest(a.runs), () => {});
  }
  return poll(refresh, EVERY_MS);
}
