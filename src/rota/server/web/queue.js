// The queue page: a live table of jobs with filters, sorting and "load more".

import { api, query } from "./api.js";
import { h, replace, update } from "./dom.js";
import * as fmt from "./format.js";
import { liveIndicator, poll, showFailure, stateBadge } from "./ui.js";

const PAGE = 100;
/** At most this many running jobs fetched beside the page (the default view). */
const RUNNING_MAX = 500;
const EVERY_MS = 2000;

const COLUMNS = [
  { key: "id", label: "ID", sort: (j) => j.id, num: true },
  { key: "name", label: "Name", sort: (j) => (j.name || "").toLowerCase() },
  { key: "user", label: "User", sort: (j) => j.user || "" },
  { key: "project", label: "Project", sort: (j) => j.project || "" },
  { key: "state", label: "State", sort: (j) => fmt.STATES.indexOf(j.state) },
  { key: "priority", label: "Priority", sort: (j) => j.priority, num: true },
  { key: "gpus", label: "GPUs", sort: (j) => j.gpus, num: true },
  { key: "pool", label: "Pool", sort: (j) => fmt.pool(j) || "" },
  { key: "created", label: "Created", sort: (j) => j.created_at },
  { key: "started", label: "Started", sort: (j) => j.started_at ?? Infinity },
  { key: "time", label: "Time", sort: null },
];

// The default order: what runs first, then what waits, then the rest; newest first within
// each (newest-first alone buried a long-running job under the jobs that ended since).
const ACTIVE_ORDER = { running: 0, starting: 1, preempted: 2, pending: 3, held: 4 };
const ACTIVITY = { key: "activity", sort: (j) => ACTIVE_ORDER[j.state] ?? 9 };
/** The states whose jobs the default view fetches whatever page they are on. */
const RUNNING = ["running", "starting", "preempted"];

function readFilters(q) {
  const given = q.get("sort");
  const sortKey = COLUMNS.some((c) => c.key === given && c.sort) ? given : "activity";
  return {
    states: new Set(q.getAll("state").filter((s) => fmt.STATES.includes(s))),
    user: q.get("user") || "",
    name: q.get("name") || "",
    sort: sortKey,
    dir: sortKey === "activity" ? "asc" : q.get("dir") === "asc" ? "asc" : "desc",
  };
}

function writeFilters(f) {
  const q = new URLSearchParams();
  for (const s of f.states) q.append("state", s);
  if (f.user) q.set("user", f.user);
  if (f.name) q.set("name", f.name);
  if (f.sort !== "activity") {
    q.set("sort", f.sort);
    q.set("dir", f.dir);
  }
  const s = q.toString();
  history.replaceState(null, "", `#/jobs${s ? `?${s}` : ""}`);
}

export function renderQueue(root, q) {
  const f = readFilters(q);
  let jobs = [];
  let next = null;
  let pages = 1;
  let counts = {};
  let generation = 0; // answers to requests made before a filter change are dropped

  const live = liveIndicator();
  const chips = h("div", { class: "chips", role: "group", "aria-label": "Filter by state" });
  const userIn = h("input", { id: "f-user", type: "search", value: f.user, autocomplete: "off",
    spellcheck: "false", placeholder: "any user" });
  const nameIn = h("input", { id: "f-name", type: "search", value: f.name, autocomplete: "off",
    spellcheck: "false", placeholder: "part of a name" });
  const sortSel = h("select", { id: "f-sort", "aria-label": "Sort by" },
    h("option", { value: "activity:asc", selected: f.sort === "activity" }, "Running first"),
    COLUMNS.filter((c) => c.sort).flatMap((c) => [
      h("option", { value: `${c.key}:desc`, selected: f.sort === c.key && f.dir === "desc" }, `${c.label} ↓`),
      h("option", { value: `${c.key}:asc`, selected: f.sort === c.key && f.dir === "asc" }, `${c.label} ↑`),
    ]));
  const clearBtn = h("button", { type: "button", class: "btn btn-small" }, "Clear filters");
  const head = h("tr");
  const body = h("tbody");
  const table = h("table", { class: "jobs", "aria-describedby": "queue-summary" },
    h("caption", { class: "sr-only" }, "Jobs, running ones first, then waiting ones, newest first within each, unless sorted otherwise"), h("thead", null, head), body);
  const summary = h("p", { id: "queue-summary", class: "muted small" });
  const empty = h("p", { class: "empty", hidden: true }, "No jobs match these filters.");
  const more = h("button", { type: "button", class: "btn", hidden: true }, "Load more");
  const error = h("p", { class: "error-box", role: "alert", hidden: true });

  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" },
      h("h1", null, "Queue"), live.el,
      h("a", { class: "btn primary push-end", href: "#/submit" }, "Submit a job")),
    chips,
    h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("div", { class: "field inline" }, h("label", { for: "f-user" }, "User"), userIn),
      h("div", { class: "field inline" }, h("label", { for: "f-name" }, "Name"), nameIn),
      h("div", { class: "field inline only-narrow" }, h("label", { for: "f-sort" }, "Sort"), sortSel),
      clearBtn),
    error,
    h("div", { class: "table-wrap jobs-wrap" }, table),
    empty,
    h("div", { class: "below-table" }, summary, more)));

  // --- header with sort buttons -------------------------------------------------------
  function paintHead() {
    replace(head, COLUMNS.map((c) => {
      const th = h("th", { scope: "col", class: [`c-${c.key}`, c.num && "num"] });
      if (!c.sort) return replace(th, c.label);
      const active = f.sort === c.key;
      if (active) th.setAttribute("aria-sort", f.dir === "asc" ? "ascending" : "descending");
      const btn = h("button", { type: "button", class: "sort", "data-sort": c.key,
        title: `Sort by ${c.label.toLowerCase()}` },
        c.label, h("span", { class: "sort-arrow", "aria-hidden": "true" }, active ? (f.dir === "asc" ? "▲" : "▼") : "↕"));
      btn.addEventListener("click", () => {
        if (f.sort === c.key) f.dir = f.dir === "asc" ? "desc" : "asc";
        else {
          f.sort = c.key;
          f.dir = ["name", "user", "project", "state", "priority", "pool"].includes(c.key) ? "asc" : "desc";
        }
        sortSel.value = `${f.sort}:${f.dir}`;
        writeFilters(f);
        paintHead();
        paintRows();
      });
      return replace(th, btn);
    }));
  }

  // chips are kept by state, so a refresh does not take the focus off one
  const chipEls = new Map();
  function chip(state, label) {
    const count = h("span", { class: "chip-count" });
    const b = h("button", { type: "button", class: ["chip", state && `chip-${state}`],
      "data-state-filter": state || "all" }, label, count);
    b.addEventListener("click", () => {
      if (state === null) f.states.clear();
      else if (f.states.has(state)) f.states.delete(state);
      else f.states.add(state);
      filtersChanged();
    });
    return { b, count };
  }
  function paintChips() {
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const shown = [null, ...fmt.STATES.filter((s) => counts[s] || f.states.has(s) || ["pending", "running"].includes(s))];
    shown.forEach((state, i) => {
      const key = state || "all";
      if (!chipEls.has(key)) chipEls.set(key, chip(state, state || "All"));
      const { b, count } = chipEls.get(key);
      const pressed = state === null ? f.states.size === 0 : f.states.has(state);
      b.setAttribute("aria-pressed", String(pressed));
      count.textContent = String(state === null ? total : counts[state] ?? 0);
      if (chips.children[i] !== b) chips.insertBefore(b, chips.children[i] || null);
    });
    const keep = new Set(shown.map((s) => s || "all"));
    for (const [key, { b }] of chipEls) {
      if (!keep.has(key)) {
        b.remove();
        chipEls.delete(key);
      }
    }
  }

  // --- rows, kept by job id so a refresh does not move focus --------------------------
  const rows = new Map();

  function cells(j) {
    // why it waits, or where a cluster's engine has it ("handed to slurm:hpc as job 12; ...")
    const reason = j.reason && (j.state === "pending" || j.state === "held" || j.reason.code === "engine")
      ? h("div", { class: "reason" }, j.reason.message) : null;
    // a running job whose GPUs stay idle ([idle] in rota.toml): "idle: its GPU 2 has been ..."
    const idle = j.idle ? h("div", { class: "reason idle-flag", title: "GPU utilisation under "
      + `${j.idle.threshold * 100}% since ${fmt.stamp(j.idle.since)}` }, `idle: ${j.idle.message}`) : null;
    const gpuBits = [fmt.gpus(j.gpus)];
    if (j.gpu_mem) gpuBits.push(fmt.bytes(j.gpu_mem));
    const on = j.gpu_indices && j.gpu_indices.length ? `on ${j.gpu_indices.join(",")}` : null;
    // a running job's progress as `rota queue` says it: "45% · step 450/1000 · loss 0.73 · ETA 37s"
    const progress = j.state === "running" && j.progress ? progressText(j.progress) : "";
    return {
      id: [String(j.id)],
      name: [h("a", { href: `#/jobs/${j.id}`, class: "job-link" }, j.name || `job ${j.id}`), reason, idle,
        progress ? h("div", { class: "reason progress-text" }, progress) : null],
      user: [j.user || "–"],
      project: [j.project || "–"],
      state: [stateBadge(j.state)],
      priority: [String(j.priority)],
      gpus: [gpuBits.join(" · "), on ? h("div", { class: "muted small" }, on) : null],
      pool: [fmt.pool(j) || "–"],
      created: [h("span", { title: fmt.stamp(j.created_at) }, fmt.ago(j.created_at))],
      started: [j.started_at ? h("span", { title: fmt.stamp(j.started_at) }, fmt.ago(j.started_at)) : "–"],
      time: timeCell(j),
    };
  }

  function timeCell(j) {
    const run = fmt.elapsed(j);
    if (fmt.TERMINAL.has(j.state)) {
      const code = j.exit_code !== null && j.exit_code !== undefined ? `exit ${j.exit_code}` : null;
      return [run !== null ? `ran ${fmt.duration(run)}` : "–", code ? h("div", { class: "muted small" }, code) : null];
    }
    if (run !== null) {
      const out = [fmt.duration(run)];
      if (j.time_limit) {
        const p = Math.min(1, run / j.time_limit);
        const bar = h("div", { class: "progress", role: "progressbar", "aria-valuemin": "0",
          "aria-valuemax": "100", "aria-valuenow": String(Math.round(p * 100)),
          "aria-label": "share of the time limit used" }, h("span"));
        bar.firstChild.style.setProperty("width", `${(p * 100).toFixed(1)}%`);
        out.push(bar);
      }
      return out;
    }
    const w = fmt.waiting(j);
    // the scheduler's start estimate (time limits / predicted run times); none: unknown
    const est = j.state === "pending" && j.estimated_start
      ? h("div", { class: "muted small start-estimate", title: `may start around ${fmt.stamp(j.estimated_start)} (estimate)` },
        `starts ~${fmt.ago(j.estimated_start)}`)
      : null;
    return [w !== null ? h("span", { class: "muted" }, `waiting ${fmt.duration(w)}`) : "–", est];
  }

  function rowFor(j) {
    let tr = rows.get(j.id);
    if (!tr) {
      tr = h("tr", { "data-job": String(j.id), class: "clickable" });
      tr.addEventListener("click", (ev) => {
        if (ev.target.closest("a, button") || window.getSelection().toString()) return;
        location.hash = `#/jobs/${j.id}`;
      });
      for (const c of COLUMNS) {
        tr.append(h("td", { class: [`c-${c.key}`, c.num && "num"], "data-label": c.label }));
      }
      rows.set(j.id, tr);
    }
    tr.dataset.state = j.state;
    const content = cells(j);
    // touch the DOM only where something changed: focus and selection survive a refresh
    COLUMNS.forEach((c, i) => update(tr.children[i], ...content[c.key]));
    return tr;
  }

  function paintRows() {
    const col = f.sort === "activity" ? ACTIVITY : COLUMNS.find((c) => c.key === f.sort);
    const sign = f.dir === "asc" ? 1 : -1;
    const sorted = [...jobs].sort((a, b) => {
      const x = col.sort(a);
      const y = col.sort(b);
      return (x < y ? -1 : x > y ? 1 : 0) * sign || (b.id - a.id);
    });
    const keep = new Set(sorted.map((j) => j.id));
    for (const [id, tr] of rows) {
      if (!keep.has(id)) {
        tr.remove();
        rows.delete(id);
      }
    }
    sorted.forEach((j, i) => {
      const tr = rowFor(j);
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
    empty.hidden = jobs.length > 0;
    table.hidden = jobs.length === 0;
    more.hidden = next === null;
    summary.textContent = jobs.length ? `${jobs.length} job${jobs.length === 1 ? "" : "s"} shown${next !== null ? "; more below" : ""}.` : "";
  }

  // --- data ---------------------------------------------------------------------------
  function listQuery(extra) {
    return query({ state: [...f.states], user: f.user, name: f.name, ...extra });
  }

  async function refresh() {
    const gen = generation;
    const want = PAGE * pages;
    try {
      // with no state chosen, the running jobs come too, however far back they started
      const running = f.states.size ? null
        : api(`/v1/jobs${query({ state: RUNNING, user: f.user, name: f.name, limit: RUNNING_MAX })}`);
      const [list, qs, active] = await Promise.all([
        api(`/v1/jobs${listQuery({ limit: want })}`),
        api("/v1/queue"),
        running,
      ]);
      if (gen !== generation || want !== PAGE * pages) return; // filters changed or "load more" ran
      const seen = new Set(list.jobs.map((j) => j.id));
      jobs = list.jobs.concat(active ? active.jobs.filter((j) => !seen.has(j.id)) : []);
      next = list.next;
      counts = qs.counts || {};
      error.hidden = true;
      live.ok();
      paintChips();
      paintRows();
    } catch (e) {
      if (gen === generation) showFailure(e, live, error);
    }
  }

  more.addEventListener("click", async () => {
    if (next === null) return;
    more.disabled = true;
    const gen = generation;
    try {
      const page = await api(`/v1/jobs${listQuery({ limit: PAGE, before: next })}`);
      if (gen !== generation) return;
      const seen = new Set(jobs.map((j) => j.id));
      jobs = jobs.concat(page.jobs.filter((j) => !seen.has(j.id)));
      next = page.next;
      pages += 1;
      paintRows();
    } catch (e) {
      live.fail(e);
    } finally {
      more.disabled = false;
    }
  });

  let typing = null;
  function filtersChanged() {
    generation += 1;
    pages = 1;
    writeFilters(f);
    paintChips();
    refresh();
  }
  const onType = () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      f.user = userIn.value.trim();
      f.name = nameIn.value.trim();
      filtersChanged();
    }, 250);
  };
  userIn.addEventListener("input", onType);
  nameIn.addEventListener("input", onType);
  sortSel.addEventListener("change", () => {
    [f.sort, f.dir] = sortSel.value.split(":");
    writeFilters(f);
    paintHead();
    paintRows();
  });
  clearBtn.addEventListener("click", () => {
    f.states.clear();
    f.user = f.name = "";
    userIn.value = nameIn.value = "";
    filtersChanged();
  });

  paintHead();
  paintChips();
  const stop = poll(refresh, EVERY_MS);
  return () => {
    stop();
    clearTimeout(typing);
  };
}

/** A running job's progress in words, as `rota queue` says it (rota/cli/ml_text.py). */
export function progressText(p) {
  const parts = [];
  if (p.fraction !== null && p.fraction !== undefined) parts.push(`${Math.round(p.fraction * 100)}%`);
  if (p.step !== null && p.step !== undefined) parts.push(`step ${p.step}${p.total_steps ? `/${p.total_steps}` : ""}`);
  if (p.epoch !== null && p.epoch !== undefined) parts.push(`epoch ${p.epoch}${p.total_epochs ? `/${p.total_epochs}` : ""}`);
  if (p.loss !== null && p.loss !== undefined) parts.push(`loss ${Number(p.loss.toPrecision(4))}`);
  if (p.eta_s !== null && p.eta_s !== undefined) parts.push(`ETA ${fmt.duration(p.eta_s)}`);
  return parts.join(" · ");
}
