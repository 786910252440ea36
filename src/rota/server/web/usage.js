// The usage page: GPU-hours per period as a stacked bar chart (plain inline SVG, drawn
// here: nothing is downloaded) by the chosen grouping, and the report's table; then the
// workspaces with their size and quota. A user sees their own jobs' usage and workspaces,
// an admin everyone's (the API decides).

import { api, query } from "./api.js";
import { niceTicks, tickText } from "./charts.js";
import { h, replace, s, stacked } from "./dom.js";
import * as fmt from "./format.js";
import { poll } from "./ui.js";

const EVERY_MS = 30000;
const COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"];

/** Per bucket (in order) the GPU-hours of each group: [[bucket, Map(group -> hours)], ...]. */
export function stacks(rows) {
  const out = new Map();
  for (const r of rows) {
    if (!out.has(r.bucket)) out.set(r.bucket, new Map());
    out.get(r.bucket).set(r.group, r.gpu_hours);
  }
  return [...out];
}

const CW = 640;
const CH = 240;
const CM = { left: 52, right: 10, top: 12, bottom: 30 };
const MAX_BAR = 56; // a lone bar stays a bar, not the whole chart

/** GPU-hours per period, stacked by group, with a value axis, period labels and a legend. */
function chart(rows, groups) {
  const bars = stacks(rows);
  const top = Math.max(1e-9, ...bars.map(([, m]) => [...m.values()].reduce((a, b) => a + b, 0)));
  const ticks = niceTicks(0, top, 4);
  const high = Math.max(top, ticks[ticks.length - 1]);
  const [pl, pr, pt, pb] = [CM.left, CW - CM.right, CM.top, CH - CM.bottom];
  const Y = (v) => pb - (v / high) * (pb - pt);
  const slot = (pr - pl) / Math.max(1, bars.length);
  const bw = Math.min(MAX_BAR, slot * 0.7);
  const every = Math.ceil(bars.length / 12); // at most about 12 period labels
  const svg = s("svg", { class: "usage-chart", viewBox: `0 0 ${CW} ${CH}`, role: "img",
    "aria-label": "GPU-hours per period, stacked by group: " +
      bars.map(([b, m]) => `${b} ${[...m.values()].reduce((a, c) => a + c, 0).toFixed(2)}`).join(", ") });
  const yAxis = s("g", { class: "axis axis-y" });
  for (const v of ticks) {
    yAxis.append(s("line", { class: "chart-grid", x1: pl, x2: pr, y1: Y(v).toFixed(1), y2: Y(v).toFixed(1) }),
      s("text", { class: "tick", x: pl - 6, y: (Y(v) + 4).toFixed(1) }, tickText(v)));
  }
  svg.append(yAxis, s("text", { class: "axis-name", x: 4, y: pt + 2 }, "GPU-h"),
    s("line", { class: "axis-line", x1: pl, x2: pr, y1: pb, y2: pb }));
  const xAxis = s("g", { class: "axis axis-x" });
  bars.forEach(([bucket, m], i) => {
    const cx = pl + slot * (i + 0.5);
    let y = pb;
    groups.forEach((g, j) => {
      const hours = m.get(g) || 0;
      const hgt = (hours / high) * (pb - pt);
      if (hgt <= 0) return;
      y -= hgt;
      svg.append(s("rect", { x: (cx - bw / 2).toFixed(1), y: y.toFixed(1), width: bw.toFixed(1), height: hgt.toFixed(1),
        fill: COLOURS[j % COLOURS.length], "data-group": g, "data-bucket": bucket },
      s("title", null, `${bucket} · ${g}: ${hours.toFixed(2)} GPU-h`)));
    });
    if (i % every === 0) xAxis.append(s("text", { class: "tick", x: cx.toFixed(1), y: CH - 10 }, bucket));
  });
  svg.append(xAxis);
  const legend = h("ul", { class: "chart-legend usage-legend" }, groups.map((g, j) =>
    h("li", { "data-group": g }, h("span", { class: "swatch", style: { background: COLOURS[j % COLOURS.length] } }), g)));
  return [h("div", { class: "card usage-card" }, legend, svg)];
}

export function renderUsage(root, params) {
  const by = ["user", "project", "pool", "tier"].includes(params.get("by")) ? params.get("by") : "user";
  const period = ["day", "week", "month"].includes(params.get("period")) ? params.get("period") : "day";
  const body = h("div", { id: "usage-body" });
  const spaces = h("div", { id: "workspaces-body" });
  const pick = (name, label, value, options) => h("div", { class: "field inline" },
    h("label", { for: `u-${name}` }, label),
    h("select", { id: `u-${name}`, name, onchange: (e) => {
      const next = new URLSearchParams({ by, period, [name]: e.target.value });
      location.hash = `#/usage?${next}`;
    } }, options.map((o) => h("option", { value: o, selected: o === value }, o))));
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Usage")),
    h("div", { class: "filters card" }, pick("by", "Group by", by, ["user", "project", "pool", "tier"]),
      pick("period", "Per", period, ["day", "week", "month"])), body,
    h("section", { class: "card workspaces", "aria-labelledby": "h-workspaces" },
      h("h2", { id: "h-workspaces" }, "Workspaces"), spaces)));
  return poll(async () => {
    const r = await api(`/v1/report${query({ by, period })}`);
    const groups = r.totals.map((t) => t.group);
    const table = h("table", { class: "usage" },
      h("thead", null, h("tr", null, [period, by].map((x) => h("th", { scope: "col" }, x)),
        ["GPU-hours", r.default_prices ? "Cost*" : "Cost", "Idle GPU-h"].map((x) => h("th", { scope: "col", class: "num" }, x)))),
      h("tbody", null, r.rows.map((x) => h("tr", null, h("td", null, x.bucket), h("td", null, x.group),
        h("td", { class: "num" }, x.gpu_hours.toFixed(2)), h("td", { class: "num" }, x.cost.toFixed(2)),
        h("td", { class: "num" }, x.wasted_gpu_hours.toFixed(2)))),
      r.totals.map((x) => h("tr", { class: "total" }, h("td", null, "total"), h("td", null, x.group),
        h("td", { class: "num" }, x.gpu_hours.toFixed(2)), h("td", { class: "num" }, x.cost.toFixed(2)),
        h("td", { class: "num" }, x.wasted_gpu_hours.toFixed(2))))));
    const note = r.default_prices ? h("p", { class: "muted" }, "* at Rota's default prices "
      + "(AWS on-demand for each tier's GPU): nobody here set a price; rota.toml [tiers] sets yours") : null;
    replace(body, r.rows.length ? [...chart(r.rows, groups), h("div", { class: "table-wrap" }, stacked(table)), note]
      : h("p", { class: "muted" }, "No GPU use in this window."));
    await paintWorkspaces(spaces);
  }, EVERY_MS);
}

async function paintWorkspaces(spaces) {
  let ws;
  try {
    ws = await api("/v1/workspaces");
  } catch (e) {
    replace(spaces, h("p", { class: "error-box" }, e.detail));
    return;
  }
  // workspaces whose home is a bucket: how this machine's copy stands with it
  const synced = ws.workspaces.some((w) => w.sync);
  const heads = ["Workspace", "Size", "Quota", ...(synced ? ["Bucket"] : []), ""];
  replace(spaces, ws.workspaces.length
    ? h("div", { class: "table-wrap" }, stacked(h("table", { class: "compact" },
      h("thead", null, h("tr", null, heads.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", null, ws.workspaces.map((w) => h("tr", { "data-workspace": w.name },
        h("td", null, h("code", { title: w.path }, w.name)),
        h("td", { class: "num" }, w.bytes === null ? "–" : fmt.bytes(w.bytes)),
        h("td", { class: "num" }, fmt.bytes(w.quota) + (w.own_quota ? " (its own)" : "")),
        synced ? h("td", { class: "sync", title: w.sync ? w.sync.url : "" }, w.sync ? syncText(w.sync) : "–") : null,
        h("td", null, w.over ? h("span", { class: "warn" }, "over quota: its jobs wait") : "")))))))
    : h("p", { class: "muted" }, `No workspaces yet: each user and project gets one at its first job (quota ${fmt.bytes(ws.default_quota)}).`));
}

function syncText(sync) {
  let said = sync.state;
  if (sync.synced_at !== null) said += `, last synced ${fmt.ago(sync.synced_at)}`;
  if (sync.error) said += `: ${sync.error} (tried again in ${Math.round(sync.retry_in || 0)} s)`;
  return sync.error ? h("span", { class: "warn" }, said) : said;
}
