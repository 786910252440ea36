// The GPU board: one card per GPU with meters, last-hour charts, its jobs, pause/resume.

import { api, post, query } from "./api.js";
import { sparkline } from "./charts.js";
import { h, replace, update } from "./dom.js";
import * as fmt from "./format.js";
import { act, liveIndicator, meter, poll, showFailure } from "./ui.js";

const EVERY_MS = 2000;

export function renderGpus(root) {
  const live = liveIndicator();
  const summary = h("p", { class: "muted" });
  const drain = h("div", { class: "callout warn", hidden: true },
    h("strong", null, "Draining. "), "No new jobs start; running ones finish. ",
    h("code", null, "rota drain --off"), " ends it.");
  const grid = h("div", { class: "gpu-grid" });
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "GPUs"), live.el), summary, drain, error, grid));

  const cards = new Map();
  let names = new Map();

  async function refresh() {
    try {
      const [g, running] = await Promise.all([
        api("/v1/gpus"),
        api(`/v1/jobs${query({ state: ["starting", "running", "preempted"], limit: 1000 })}`),
      ]);
      names = new Map(running.jobs.map((j) => [j.id, j]));
      live.ok();
      error.hidden = true;
      drain.hidden = !g.draining;
      const alloc = g.gpus.reduce((a, x) => a + x.allocated, 0);
      const paused = g.gpus.filter((x) => x.paused).length;
      const sick = g.gpus.filter((x) => !x.healthy).length;
      summary.textContent = `${g.gpus.length} ${g.devices} GPU${g.gpus.length === 1 ? "" : "s"} · ` +
        `${+alloc.toFixed(2)} of ${g.gpus.length} allocated` +
        (paused ? ` · ${paused} paused` : "") + (sick ? ` · ${sick} unhealthy` : "");
      const seen = new Set();
      g.gpus.forEach((gpu, i) => {
        seen.add(gpu.index);
        let card = cards.get(gpu.index);
        if (!card) {
          card = gpuCard(gpu.index, refresh);
          cards.set(gpu.index, card);
        }
        if (grid.children[i] !== card.el) grid.insertBefore(card.el, grid.children[i] || null);
        card.paint(gpu, names);
      });
      for (const [idx, card] of cards) {
        if (!seen.has(idx)) {
          card.el.remove();
          cards.delete(idx);
        }
      }
      if (!g.gpus.length) replace(grid, h("p", { class: "empty" }, "No GPUs found on this machine."));
    } catch (e) {
      showFailure(e, live, error);
    }
  }
  return poll(refresh, EVERY_MS);
}

function row(label, value, bar) {
  return h("div", { class: "gpu-row" },
    h("div", { class: "gpu-row-head" }, h("span", { class: "gpu-label" }, label), h("span", { class: "gpu-value" }, value)),
    bar);
}

function gpuCard(index, refresh) {
  const title = h("h2", null, `GPU ${index}`);
  const model = h("div", { class: "muted small gpu-model" });
  const badges = h("div", { class: "badges" });
  const meters = h("div", { class: "gpu-meters" });
  const charts = h("div", { class: "gpu-charts" });
  const jobs = h("div", { class: "gpu-jobs" });
  const btn = h("button", { type: "button", class: "btn btn-small", "data-gpu-action": "pause" }, "Pause");
  const el = h("article", { class: "card gpu-card", "data-gpu": String(index), "aria-labelledby": `gpu-${index}-title` },
    h("header", { class: "gpu-head" }, h("div", { class: "gpu-title" }, title, badges), model),
    meters, charts, jobs,
    h("footer", { class: "gpu-foot" }, btn));
  title.id = `gpu-${index}-title`;
  let paused = false;

  btn.addEventListener("click", async () => {
    const verb = paused ? "resume" : "pause";
    const out = await act(btn, () => post(`/v1/gpus/${index}/${verb}`),
      { success: `GPU ${index} ${paused ? "resumed" : "paused"}` });
    if (out !== undefined) refresh();
  });

  function paint(g, names) {
    paused = g.paused;
    el.classList.toggle("is-paused", g.paused);
    el.classList.toggle("is-sick", !g.healthy);
    model.textContent = g.name;
    btn.textContent = g.paused ? "Resume" : "Pause";
    btn.dataset.gpuAction = g.paused ? "resume" : "pause";
    btn.title = g.paused ? "Let new jobs start on this GPU again" : "Start no new jobs here; running ones go on";
    update(badges,
      h("span", { class: ["badge", g.healthy ? "badge-ok" : "badge-bad"] }, g.healthy ? "healthy" : "unhealthy"),
      g.paused ? h("span", { class: "badge badge-paused" }, "paused") : null,
      g.temperature_c !== null && g.temperature_c !== undefined
        ? h("span", { class: "badge badge-plain", title: "temperature" }, `${Math.round(g.temperature_c)}°C`) : null);

    const total = g.memory_total || 0;
    const ext = g.memory_external || 0;
    const ours = Math.max(0, (g.memory_used || 0) - ext);
    update(meters,
      row("Allocated", fmt.percent(g.allocated),
        meter([{ value: g.allocated, cls: "m-alloc", label: "allocated to Rota jobs" }], { label: `allocated ${fmt.percent(g.allocated)}` })),
      row("Memory", `${fmt.bytes(g.memory_used)} / ${fmt.bytes(total)}`,
        meter([
          { value: total ? ours / total : 0, cls: "m-mem", label: `used by Rota jobs: ${fmt.bytes(ours)}` },
          { value: total ? ext / total : 0, cls: "m-ext", label: `not started by Rota: ${fmt.bytes(ext)}` },
        ], { label: `memory ${fmt.bytes(g.memory_used)} of ${fmt.bytes(total)}`, marker: total ? (g.reserved_memory || 0) / total : 0 })),
      h("div", { class: "gpu-sub muted small" },
        h("span", { class: "key key-ext", "aria-hidden": "true" }), `outside Rota ${fmt.bytes(ext)}`,
        " · ", h("span", { class: "key key-res", "aria-hidden": "true" }), `reserved ${fmt.bytes(g.reserved_memory || 0)}`),
      row("Utilisation", fmt.percent(g.utilization),
        meter([{ value: g.utilization || 0, cls: "m-util" }], { label: `utilisation ${fmt.percent(g.utilization)}` })));

    const hist = Array.isArray(g.history) ? g.history : null;
    if (hist && hist.length) {
      // the samples, then the reading of now; the window grows with the daemon's uptime
      const end = Math.max(fmt.now(), hist[hist.length - 1][0]);
      const pts = [...hist, [end, g.allocated, g.memory_used, g.utilization]];
      const window = Math.min(3600, Math.max(60, end - hist[0][0]));
      const opts = { end, window };
      const series = (k) => pts.map((p) => [p[0], p[k]]);
      replace(charts,
        chart("Allocated", sparkline(series(1), { ...opts, max: 1, cls: "c-alloc", label: `allocation over the last ${fmt.duration(window)}, now ${fmt.percent(g.allocated)}` })),
        chart("Memory", sparkline(series(2), { ...opts, max: total || 1, cls: "c-mem", label: `memory used over the last ${fmt.duration(window)}, now ${fmt.bytes(g.memory_used)}` })),
        chart("Utilisation", sparkline(series(3), { ...opts, max: 1, cls: "c-util", label: `utilisation over the last ${fmt.duration(window)}, now ${fmt.percent(g.utilization)}` })),
        h("div", { class: "chart-axis muted small", "aria-hidden": "true" },
          h("span", null, `−${Math.round(window / 60)} min`), h("span", null, "now")));
    } else {
      replace(charts, h("p", { class: "muted small" }, hist ? "No history yet." : "This daemon keeps no history."));
    }

    update(jobs, g.jobs.length
      ? [h("h3", null, `Jobs (${g.jobs.length})`), h("ul", { class: "gpu-joblist" }, g.jobs.map((id) => {
        const j = names.get(id);
        return h("li", null, h("a", { href: `#/jobs/${Number(id)}` }, `#${id}`),
          j ? [" ", h("span", null, j.name), h("span", { class: "muted small" }, ` · ${j.user} · ${fmt.gpus(j.gpus)}`)] : null);
      }))]
      : h("p", { class: "muted small" }, g.paused ? "Idle and paused." : "Idle."));
  }
  return { el, paint };
}

function chart(label, svg) {
  return h("figure", { class: "chart" }, h("figcaption", { class: "small" }, label), svg);
}
