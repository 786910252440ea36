// The pipelines page: each recurring fine-tuning pipeline (GET /v1/pipelines) with what it
// does next, and one pipeline's rounds (GET /v1/pipelines/NAME): each round's steps and
// their jobs, its verdict with both numbers, the held-out metric per round as a chart, and
// the model lineage. Pause, resume and run-now go to the API; its refusals are shown.

import { api, post } from "./api.js";
import { h, replace, s } from "./dom.js";
import * as fmt from "./format.js";
import { liveIndicator, poll, showFailure, stateBadge, toast } from "./ui.js";

const EVERY_MS = 5000;
const STEPS = ["prep", "train", "merge", "evaluate", "evaluate_base", "record"];
const W = 640;
const H = 220;
const PAD = 36;

/** A number for people: to 4 significant digits. */
function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? String(Number(v.toPrecision(4))) : "–";
}

const pathOf = (name) => `/v1/pipelines/${encodeURIComponent(name)}`;

function verdictBadge(state) {
  return h("span", { class: ["badge", `pl-${state}`], "data-verdict": state }, state);
}

async function act(name, action, done) {
  try {
    const body = action === "pause" ? { reason: "paused from the dashboard" } : undefined;
    const p = await post(`${pathOf(name)}/${action}`, body);
    toast(`${p.name}: ${p.why}`);
  } catch (e) {
    toast(e.message || String(e), "error");
  }
  done();
}

function actions(p, done) {
  const b = (label, action, extra = {}) => h("button", { type: "button", class: "btn btn-small",
    "data-action": action, onclick: () => act(p.name, action, done), ...extra }, label);
  return h("span", { class: "pl-actions" },
    p.paused ? b("Resume", "resume") : b("Pause", "pause"),
    b("Run now", "run-now", { title: "The next round now (refused while one is open)" }));
}

// --- the list -----------------------------------------------------------------------------

function listTable(pipes, refresh) {
  if (!pipes.length) {
    return h("p", { class: "empty" }, "No pipelines yet. Add one with ",
      h("code", null, "rota pipeline add FILE.yaml"), " (docs/pipelines.md).");
  }
  const heads = ["Name", "Owner", "State", "Rounds", "Trains", "Base", "Next", ""];
  return h("div", { class: "table-wrap" }, h("table", { class: "pipelines" },
    h("thead", null, h("tr", null, heads.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", null, pipes.map((p) => h("tr", { "data-pipeline": p.name },
      h("th", { scope: "row" }, h("a", { href: `#/pipelines/${encodeURIComponent(p.name)}` }, p.name)),
      h("td", null, p.user),
      h("td", null, h("span", { class: ["badge", `pl-${p.state}`] }, p.state)),
      h("td", { class: "num" }, String(p.rounds)),
      h("td", null, p.train),
      h("td", { class: "pl-base" }, p.base_round ? `round ${p.base_round}` : "model_repo",
        p.base_metric !== null ? h("span", { class: "muted" }, ` (${p.metric} ${num(p.base_metric)})`) : null),
      h("td", { class: "pl-why" }, p.why),
      h("td", null, actions(p, refresh)))))));
}

function renderList(root) {
  const live = liveIndicator();
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const body = h("div");
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Pipelines"), live.el), error, body));
  let shown = null;
  async function refresh() {
    try {
      const answer = await api("/v1/pipelines");
      live.ok();
      error.hidden = true;
      const text = JSON.stringify(answer);
      if (text !== shown) replace(body, listTable(answer.pipelines, refresh));
      shown = text;
    } catch (e) {
      showFailure(e, live, error);
    }
  }
  return poll(refresh, EVERY_MS);
}

// --- one pipeline -------------------------------------------------------------------------

/** The held-out metric per round: the merged model's and the base's, each verdict marked. */
export function roundsChart(rounds, metric) {
  const pts = rounds.filter((r) => typeof r.metric === "number").sort((a, b) => a.number - b.number);
  const label = `${metric} per round: ` + pts.map((r) =>
    `round ${r.number} ${num(r.metric)} (${r.state}; base ${num(r.base_metric)})`).join("; ");
  const svg = s("svg", { class: "pl-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": label, focusable: "false" });
  svg.append(s("title", null, label));
  if (!pts.length) return svg;
  const values = pts.flatMap((r) => [r.metric, r.base_metric]).filter((v) => typeof v === "number");
  let [y0, y1] = [Math.min(...values), Math.max(...values)];
  if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
  const [x0, x1] = [pts[0].number, pts[pts.length - 1].number];
  const x = (n) => (x1 === x0 ? W / 2 : PAD + ((n - x0) / (x1 - x0)) * (W - 2 * PAD));
  const y = (v) => H - PAD - ((v - y0) / (y1 - y0)) * (H - 2 * PAD);
  for (const v of [y1, y0]) {
    svg.append(s("text", { x: PAD - 4, y: y(v) + 4, class: "pl-axis pl-axis-end" }, num(v)));
  }
  const line = (key, cls) => {
    const ps = pts.filter((r) => typeof r[key] === "number");
    if (ps.length) {
      svg.append(s("polyline", { class: cls, fill: "none",
        points: ps.map((r) => `${x(r.number).toFixed(1)},${y(r[key]).toFixed(1)}`).join(" ") }));
    }
  };
  line("base_metric", "pl-line-base");
  line("metric", "pl-line-merged");
  for (const r of pts) {
    const title = `round ${r.number}: ${r.state}, ${metric} ${num(r.metric)} against the base's ${num(r.base_metric)}`;
    svg.append(s("circle", { cx: x(r.number).toFixed(1), cy: y(r.metric).toFixed(1), r: 6,
      class: ["pl-point", `pl-${r.state}`].join(" "), "data-round": String(r.number) }, s("title", null, title)));
    svg.append(s("text", { x: x(r.number).toFixed(1), y: H - 8, class: "pl-axis pl-axis-mid" },
      `r${r.number}`));
  }
  return svg;
}

function stepList(r) {
  const keys = STEPS.filter((k) => k in r.jobs);
  return h("ul", { class: "pl-steps" }, keys.map((k) => h("li", { "data-step": k },
    h("span", { class: "pl-step" }, k.replace("_", " ")), " ",
    h("a", { href: `#/jobs/${r.jobs[k]}`, class: "job-link" }, `#${r.jobs[k]}`), " ",
    stateBadge(r.job_states[k] || "gone"))));
}

function roundCard(r, baseRound) {
  const lineage = [r.base_model, r.adapter || "–", r.merged_model || "–"];
  const facts = r.facts || {};
  const data = r.chunk !== null && r.chunks ? `chunk ${r.chunk + 1} of ${r.chunks}` : "no chunk yet";
  return h("article", { class: "card pl-round", "data-round": String(r.number) },
    h("h3", null, `Round ${r.number} `, verdictBadge(r.state),
      r.state === "running" ? h("span", { class: "muted" }, ` at step ${r.step}`) : null,
      r.number === baseRound ? h("span", { class: "badge pl-current" }, "the current base") : null),
    r.reason ? h("p", { class: "pl-reason" }, r.reason) : null,
    h("dl", { class: "pl-facts" },
      h("dt", null, "Began"), h("dd", null, fmt.stamp(r.started_at)),
      h("dt", null, "Data"), h("dd", null, data,
        facts.chunk_rows != null ? ` · ${facts.chunk_rows} examples, ${facts.heldout_rows} held out` : ""),
      r.metric !== null ? [h("dt", null, "Held-out"), h("dd", null,
        `${num(r.metric)} against the base's ${num(r.base_metric)}`)] : null,
      r.remote_task ? [h("dt", null, "Gradients task"), h("dd", null, h("code", null, r.remote_task))] : null),
    h("p", { class: "pl-lineage", "aria-label": "lineage: base, adapter, merged model" },
      lineage.map((m, i) => [i ? h("span", { class: "muted", "aria-hidden": "true" }, " → ") : null,
        h("code", null, m)])),
    stepList(r));
}

function renderOne(root, name) {
  const live = liveIndicator();
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const body = h("div");
  replace(root, h("section", { class: "page" },
    h("p", null, h("a", { href: "#/pipelines" }, "← Pipelines")),
    h("div", { class: "page-head" }, h("h1", null, `Pipeline ${name}`), live.el), error, body));
  let shown = null;
  async function refresh() {
    try {
      const d = await api(`${pathOf(name)}?limit=100`);
      live.ok();
      error.hidden = true;
      const text = JSON.stringify(d);
      if (text === shown) return;
      shown = text;
      const p = d.pipeline;
      replace(body,
        h("div", { class: "card pl-summary" },
          h("p", null, h("span", { class: ["badge", `pl-${p.state}`] }, p.state), " ",
            h("span", { class: "pl-why" }, p.why)),
          h("p", null, "Base: ", h("code", null, p.base_model),
            p.base_round ? ` (round ${p.base_round}` : " (model_repo",
            p.base_metric !== null ? `, ${p.metric} ${num(p.base_metric)})` : ")"),
          h("p", { class: "muted" }, `${p.format} form · trains ${p.train} · owner ${p.user} · ` +
            `${p.rounds} round${p.rounds === 1 ? "" : "s"} · failed in a row: ${p.failures}`),
          actions(p, refresh)),
        h("figure", { class: "card" }, h("h2", null, `${p.metric} per round`),
          h("p", { class: "muted small" }, "filled: the merged model; line: the base it was compared with"),
          roundsChart(d.rounds, p.metric)),
        h("h2", null, "Rounds"),
        d.rounds.length ? d.rounds.map((r) => roundCard(r, p.base_round))
          : h("p", { class: "empty" }, "No round yet."));
    } catch (e) {
      showFailure(e, live, error);
    }
  }
  return poll(refresh, EVERY_MS);
}

export function renderPipelines(root, name) {
  return name ? renderOne(root, name) : renderList(root);
}
