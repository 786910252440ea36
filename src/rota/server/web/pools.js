// The pools page: this machine and each cluster rota.toml declares, with its engine's health
// and what it can do. An engine's message is its own text (an error from sinfo, say): it
// only ever goes in as text, and wraps rather than being cut.

import { api } from "./api.js";
import { h, replace, update } from "./dom.js";
import { liveIndicator, poll, showFailure } from "./ui.js";

// each refresh asks every engine (a Slurm command, a Ray head), for up to 10 s each
const EVERY_MS = 5000;

/** The capabilities, in the words `rota pools` uses. */
const CAN = [["fractional_gpus", "GPU fractions"], ["gpu_memory", "GPU memory"],
  ["multi_node", "multi-node"], ["arrays", "arrays"], ["dependencies", "dependencies"],
  ["conda", "conda"], ["images", "images"]];

const HEADS = ["Pool", "Engine", "Reachable", "GPUs free", "Max in flight", "Can do", "Engine's message"];

/** What a pool can do, as words; null capabilities: Rota places the jobs itself. */
export function canDo(caps) {
  if (!caps) return "Rota places jobs here";
  return CAN.filter(([key]) => caps[key]).map(([, words]) => words).join(", ") || "whole GPUs only";
}

/** "free of total", as the engine reports them; "–" when it reports none. */
export function gpusFree(health) {
  if (health.gpus_total === null || health.gpus_total === undefined) return "–";
  const free = health.gpus_free === null || health.gpus_free === undefined ? "?" : String(+health.gpus_free);
  return `${free} of ${+health.gpus_total}`;
}

function cells(p, isDefault) {
  const ok = p.health.reachable;
  return [
    [h("span", { class: "pool-name" }, p.name),
      isDefault ? [" ", h("span", { class: "badge badge-default" }, "default")] : null,
      p.description ? h("div", { class: "muted small" }, p.description) : null],
    [p.engine],
    [h("span", { class: ["badge", ok ? "badge-ok" : "badge-bad"], "data-reachable": String(ok) }, ok ? "yes" : "no")],
    [gpusFree(p.health)],
    [String(p.max_in_flight)],
    [canDo(p.capabilities)],
    [h("div", { class: "pool-message" }, p.health.message || "–")],
  ];
}

const CLASSES = ["c-name", "c-engine", "c-up", "c-gpus num", "c-max num", "c-can", "c-message"];

export function renderPools(root) {
  const live = liveIndicator();
  const summary = h("p", { class: "muted", id: "pools-summary" });
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const body = h("tbody");
  const table = h("table", { class: "pools", "aria-describedby": "pools-summary" },
    h("caption", { class: "sr-only" }, "Pools: where jobs can run"),
    h("thead", null, h("tr", null, HEADS.map((x, i) => h("th", { scope: "col", class: CLASSES[i] }, x)))),
    body);
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Pools"), live.el),
    summary, error,
    h("div", { class: "table-wrap pools-wrap" }, table),
    h("p", { class: "muted small" }, "Max in flight: how many jobs Rota hands to the engine at once. ",
      "Jobs go to the default pool unless they name another (", h("code", null, "rota submit --pool NAME"), ").")));

  const rows = new Map(); // kept by name: a refresh that changes nothing leaves the DOM alone
  function rowFor(p, isDefault) {
    let tr = rows.get(p.name);
    if (!tr) {
      tr = h("tr", { "data-pool": p.name }, CLASSES.map((c, i) => h("td", { class: c, "data-label": HEADS[i] })));
      rows.set(p.name, tr);
    }
    cells(p, isDefault).forEach((content, i) => update(tr.children[i], ...content));
    return tr;
  }

  function paint(answer) {
    const keep = new Set(answer.pools.map((p) => p.name));
    for (const [name, tr] of rows) {
      if (!keep.has(name)) {
        tr.remove();
        rows.delete(name);
      }
    }
    answer.pools.forEach((p, i) => {
      const tr = rowFor(p, p.name === answer.default);
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
    const down = answer.pools.filter((p) => !p.health.reachable).length;
    const n = answer.pools.length;
    summary.textContent = `${n} pool${n === 1 ? "" : "s"} · default: ${answer.default}` +
      (down ? ` · ${down} unreachable` : "");
  }

  async function refresh() {
    try {
      const answer = await api("/v1/pools");
      live.ok();
      error.hidden = true;
      paint(answer);
    } catch (e) {
      showFailure(e, live, error);
    }
  }
  return poll(refresh, EVERY_MS);
}
