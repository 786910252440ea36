// One job: its spec, timeline, attempts, a live log tail with search, and the actions.

import { api, download, post, streamEvents } from "./api.js";
import { h, highlighted, replace, stacked } from "./dom.js";
import { chartKey, metricChart } from "./charts.js";
import { refLink } from "./datasets.js";
import * as fmt from "./format.js";
import { act, confirmDialog, liveIndicator, poll, stateBadge, toast } from "./ui.js";

const EVERY_MS = 2000;
/** Pause before following the log again after the connection dropped. */
const LOG_RECONNECT_MS = 2000;
const MAX_LINES = 5000;
// the log's last lines a failed job's banner shows
const END_LINES = 8;

/** An argv word as a POSIX shell would read it back: bare when safe, else single-quoted. */
export function shellQuote(arg) {
  if (/^[A-Za-z0-9_\-+=.,/:@%^]+$/.test(arg)) return arg;
  return `'${arg.replace(/'/g, "'\\''")}'`;
}

/** Which actions apply to a job in this state. */
export function actionsFor(state) {
  const out = [];
  if (state === "held") out.push("release");
  if (state === "pending") out.push("hold");
  if (state === "running" || fmt.TERMINAL.has(state)) out.push("requeue");
  if (!fmt.TERMINAL.has(state)) out.push("cancel");
  return out;
}

const ACTIONS = {
  hold: { label: "Hold", done: "held", title: "Keep it from starting until released" },
  release: { label: "Release", done: "released", title: "Let it be scheduled again" },
  requeue: {
    label: "Requeue",
    title: "Running: stop it and queue it again. Ended: submit the same spec as a new job",
    done: "queued again",
    confirm: (j) => (j.state === "running" ? {
      title: `Requeue job ${j.id}?`,
      message: `“${j.name}” is running. It gets SIGTERM (SIGKILL after its grace period) and waits in the queue again.`,
      ok: "Stop and requeue",
      danger: true,
    } : null),
  },
  cancel: {
    label: "Cancel job",
    danger: true,
    done: "cancel requested",
    title: "Stop it for good",
    confirm: (j) => ({
      title: `Cancel job ${j.id}?`,
      message: fmt.ACTIVE.has(j.state)
        ? `“${j.name}” is ${j.state}. It gets SIGTERM, then SIGKILL after its grace period. This cannot be undone.`
        : `“${j.name}” will not run. This cannot be undone.`,
      ok: "Cancel job",
      danger: true,
    }),
  },
};

export function renderJob(root, id) {
  let job = null;
  let shownState = null;
  const live = liveIndicator();
  const title = h("h1", null, `Job ${id}`);
  const badge = h("span");
  const actions = h("div", { class: "actions push-end", role: "group", "aria-label": "Job actions" });
  const reasonBox = h("div", { class: "callout", hidden: true });
  // a job that failed (or timed out) says so first: how it ended and its log's last lines
  const endBox = h("div", { class: "end-banner", role: "alert", hidden: true });
  const overview = h("dl", { class: "kv" });
  const command = h("pre", { class: "argv", tabindex: "0", "aria-label": "Command" });
  const envBox = h("div");
  const specBox = h("dl", { class: "kv" });
  const specHead = h("h3", { hidden: true }, "Settings");
  const timeline = h("ol", { class: "timeline" });
  const attempts = h("div", { class: "table-wrap" });
  const notFound = h("div", { class: "error-box", role: "alert", hidden: true });
  const log = logPanel(id);
  const metrics = metricsPanel(id);
  const saved = artifactsPanel(id);

  replace(root, h("section", { class: "page" },
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/jobs" }, "← Queue")),
    h("div", { class: "page-head" }, title, badge, live.el, actions),
    notFound,
    endBox,
    reasonBox,
    h("div", { class: "grid-2" },
      h("section", { class: "card", "aria-labelledby": "h-overview" },
        h("h2", { id: "h-overview" }, "Overview"), overview),
      h("section", { class: "card", "aria-labelledby": "h-spec" },
        h("h2", { id: "h-spec" }, "Spec"),
        h("h3", null, "Command"), command, envBox, specHead, specBox)),
    metrics.el,
    saved.el,
    log.el,
    h("div", { class: "grid-2" },
      h("section", { class: "card", "aria-labelledby": "h-timeline" },
        h("h2", { id: "h-timeline" }, "Timeline"), timeline),
      h("section", { class: "card", "aria-labelledby": "h-attempts" },
        h("h2", { id: "h-attempts" }, "Attempts"), attempts))));

  // its model card and training report, as it stands now (rota card JOB)
  const cardBtn = h("button", { type: "button", class: "btn", title: "Its model card and training report, as one HTML page" }, "Card");
  cardBtn.addEventListener("click", () => act(cardBtn, () => download(`/v1/jobs/${id}/card?format=html`, `job-${id}-card.html`)));

  function paintActions() {
    if (job.state === shownState) return;
    shownState = job.state;
    replace(actions, cardBtn, actionsFor(job.state).map((name) => {
      const a = ACTIONS[name];
      const b = h("button", { type: "button", class: ["btn", a.danger && "danger"], "data-action": name,
        title: a.title }, a.label);
      b.addEventListener("click", async () => {
        const question = a.confirm && a.confirm(job);
        if (question && !(await confirmDialog(question))) return;
        const out = await act(b, () => post(`/v1/jobs/${id}/${name}`));
        if (out === undefined) return;
        const other = out.job && out.job.id !== id ? out.job.id : null;
        toast(other ? `Job ${id} submitted again as job ${other}` : `Job ${id}: ${a.done}`, "ok");
        if (other) location.hash = `#/jobs/${other}`;
        else refresh();
      });
      return b;
    }));
  }

  function paintOverview() {
    const j = job;
    const rows = [
      ["User", j.user],
      ["Priority", `${j.priority} (lower runs first)`],
      ["GPUs", fmt.gpus(j.gpus) + (j.gpu_mem ? ` · ${fmt.bytes(j.gpu_mem)} each` : "")],
      ["On GPUs", j.gpu_indices.length ? j.gpu_indices.join(", ") : "–"],
      ["Pool", fmt.pool(j) ? h("a", { href: "#/pools", class: "job-pool" }, fmt.pool(j)) : "–"],
      ...engineRows(j.engine),
      ...(j.idle ? [["Idle GPUs", h("span", { class: "warn idle-flag" }, j.idle.message)]] : []),
      ["Created", h("span", { title: fmt.ago(j.created_at) }, fmt.stamp(j.created_at))],
      ["Started", j.started_at ? fmt.stamp(j.started_at) : "–"],
      ["Ended", j.ended_at ? fmt.stamp(j.ended_at) : "–"],
      ["Run time", runTime(j)],
      ["Progress", progressOf(j.progress)],
      ["Attempts", String(j.attempts)],
      ["Exit code", j.exit_code ?? "–"],
      ["End reason", j.end_reason || "–"],
      ["Session", j.session],
      ["Source", j.source],
      ...trackerRows(j.tracking),
    ];
    replace(overview, rows.flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
  }

  // Where a cluster pool's engine has the job, in its own words (text only).
  function engineRows(e) {
    if (!e) return [];
    return [["Engine", h("div", { class: "job-engine" }, fmt.engineLine(e),
      e.reason ? h("div", { class: "muted small engine-reason" }, e.reason) : null)]];
  }

  // Where the job's MLflow and W&B runs are: a link where there is one.
  function trackerRows(t) {
    if (!t) return [];
    const link = (url, text) => h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, text);
    const rows = [];
    const ml = t.mlflow;
    if (ml) {
      rows.push(["MLflow", ml.error ? `not tracked: ${ml.error}`
        : !ml.run_id ? "the run is being created"
        : ml.url ? link(ml.url, `run ${ml.run_id}`)
        : `run ${ml.run_id} · experiment ${ml.experiment} · ${ml.uri}`]);
    }
    const wb = t.wandb;
    if (wb) {
      rows.push(["W&B", wb.url ? link(wb.url, `run ${wb.run_id}`)
        : `run ${wb.run_id} · project ${wb.project}` + (wb.offline_dir ? ` · offline: ${wb.offline_dir}` : "")]);
    }
    return rows;
  }

  function runTime(j) {
    const run = fmt.elapsed(j);
    if (run === null) {
      const w = fmt.waiting(j);
      return w === null ? "–" : `waiting ${fmt.duration(w)}`;
    }
    const limit = j.spec && j.spec.time_limit;
    if (!limit) return fmt.duration(run);
    const p = Math.min(1, run / limit);
    const bar = h("div", { class: "progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
      "aria-valuenow": String(Math.round(p * 100)), "aria-label": "share of the time limit used" }, h("span"));
    bar.firstChild.style.setProperty("width", `${(p * 100).toFixed(1)}%`);
    return h("div", null, `${fmt.duration(run)} of ${fmt.duration(limit)} limit`, bar);
  }

  function paintReason() {
    const r = job.reason;
    reasonBox.hidden = !r;
    if (!r) return;
    const label = job.state === "held" ? "Held. " : r.code === "engine" ? "Engine: " : "Waiting: ";
    const bits = [h("strong", null, label), r.message];
    if (r.until) bits.push(` (until ${fmt.stamp(r.until)})`);
    if (r.blocker) bits.push(" · blocked by ", h("a", { href: `#/jobs/${Number(r.blocker)}` }, `job ${r.blocker}`));
    replace(reasonBox, ...bits);
  }

  let specPainted = false;
  function paintSpec() {
    if (specPainted || !job.spec) return;
    specPainted = true;
    const sp = job.spec;
    command.textContent = sp.shell ? sp.command[0] : sp.command.map(shellQuote).join(" ");
    const secret = new Set(sp.secret_env || []);
    const keys = Object.keys(sp.env || {}).sort();
    replace(envBox, keys.length ? [h("h3", null, "Environment"),
      h("table", { class: "env" }, h("tbody", null, keys.map((k) => h("tr", null,
        h("th", { scope: "row" }, k),
        h("td", null, secret.has(k)
          ? [h("span", { class: "masked" }, sp.env[k]), " ", h("span", { class: "badge badge-secret" }, "secret")]
          : h("code", null, sp.env[k]))))))] : []);
    const rows = [
      ["Run through a shell", sp.shell ? "yes" : null],
      ["Working directory", sp.cwd],
      ["Conda env", sp.conda],
      ["Model (--llm)", sp.llm],
      ["GPU type", sp.gpu_type],
      ["Allowed GPUs", sp.allowed_gpus && sp.allowed_gpus.join(",")],
      ["Time limit", sp.time_limit ? fmt.duration(sp.time_limit) : null],
      ["Grace (SIGTERM→SIGKILL)", fmt.duration(sp.grace)],
      ["Retries", sp.retries ? `${sp.retries}, backoff ${fmt.duration(sp.retry_backoff)}–${fmt.duration(sp.retry_backoff_max)}` : null],
      ["Datasets", sp.datasets && sp.datasets.length
        ? h("ul", { class: "job-datasets" }, sp.datasets.map((ref) => h("li", null, refLink(ref)))) : null],
      ["After jobs", sp.after && sp.after.length ? sp.after.map((a) => h("a", { href: `#/jobs/${Number(a)}` }, `#${a} `)) : null],
      ["--cuda argument", sp.cuda_arg ? "yes" : null],
      ["Tags", sp.tags && sp.tags.length ? sp.tags.join(", ") : null],
    ].filter(([, v]) => v !== null && v !== undefined && v !== "");
    specHead.hidden = !rows.length;
    replace(specBox, rows.flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
  }

  function paintAttempts() {
    const list = job.attempts_detail || [];
    if (!list.length) {
      replace(attempts, h("p", { class: "muted" }, "No attempt yet."));
      return;
    }
    const heads = ["#", "GPUs", "Started", "Ended", "Run time", "Exit", "Outcome", "PID / engine job"];
    replace(attempts, stacked(h("table", { class: "compact" },
      h("thead", null, h("tr", null, heads.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", null, list.map((a) => h("tr", null,
        h("td", null, String(a.number)),
        h("td", null, (a.gpus && a.gpus.length ? a.gpus.join(",") : "CPU") + (a.fraction && a.fraction < 1 ? ` (${a.fraction})` : "")),
        h("td", null, fmt.stamp(a.started_at)),
        h("td", null, a.ended_at ? fmt.stamp(a.ended_at) : "–"),
        h("td", null, a.started_at ? fmt.duration((a.ended_at || fmt.now()) - a.started_at) : "–"),
        h("td", null, a.exit_code ?? (a.signal ? `signal ${a.signal}` : "–")),
        h("td", { title: a.reason || "" }, a.outcome || (a.ended_at ? "–" : "running"), a.reason ? h("div", { class: "muted small" }, a.reason) : null),
        h("td", null, a.engine_id || a.pid || "–")))))));
  }

  let eventsSeen = -1;
  function paintEvents(events) {
    if (events.length === eventsSeen) return;
    eventsSeen = events.length;
    replace(timeline, events.map((e) => h("li", { class: ["tl-item", e.to && `tl-${e.to}`] },
      h("time", { title: fmt.stamp(e.ts) }, fmt.clock(e.ts)),
      h("div", { class: "tl-body" },
        h("span", { class: "tl-kind" }, e.kind),
        e.from || e.to ? h("span", { class: "tl-move" }, ` ${e.from || "·"} → ${e.to || "·"}`) : null,
        e.message ? h("div", { class: "tl-msg" }, e.message) : null))));
    if (!events.length) replace(timeline, h("li", { class: "muted" }, "No events."));
  }

  function paintEnd() {
    const ended = job.state === "failed" || job.state === "timeout";
    endBox.hidden = !ended;
    if (!ended) return;
    const how = job.state === "timeout" ? "Timed out" : "Failed";
    const code = job.exit_code !== null && job.exit_code !== undefined ? ` (exit code ${job.exit_code})` : "";
    const tail = log.tail(END_LINES);
    replace(endBox, h("strong", null, `${how}${code}: `), job.end_reason || "no reason recorded",
      tail.length ? h("pre", { class: "log end-tail", "aria-label": "The log's last lines" }, tail.join("\n"))
        : h("p", { class: "muted small" }, "(its log is empty)"));
  }

  let stopJobPoll = null;
  async function refresh() {
    try {
      const [j, ev] = await Promise.all([api(`/v1/jobs/${id}`), api(`/v1/jobs/${id}/events`)]);
      job = j;
      live.ok();
      document.title = `${j.name} · job ${id} · Rota`;
      title.textContent = j.name;
      title.append(" ", h("span", { class: "muted id" }, `#${id}`));
      replace(badge, stateBadge(j.state));
      paintActions();
      paintReason();
      paintEnd();
      paintOverview();
      paintSpec();
      paintAttempts();
      paintEvents(ev.events);
      log.jobState(j.state);
      await Promise.all([metrics.refresh(), saved.refresh(j)]);
    } catch (e) {
      if (e.status === 401) return;
      live.fail(e);
      if (e.status === 404) {
        notFound.textContent = e.detail;
        notFound.hidden = false;
        if (stopJobPoll) stopJobPoll();
        log.stop();
      }
    }
  }
  stopJobPoll = poll(refresh, EVERY_MS);
  return () => {
    stopJobPoll();
    log.stop();
    document.title = "Rota";
  };
}

// --- saved outputs (--output DIR) -----------------------------------------------------------
function artifactsPanel(id) {
  const body = h("div");
  const el = h("section", { class: "card artifacts", "aria-labelledby": "h-artifacts", hidden: true },
    h("h2", { id: "h-artifacts" }, "Artifacts"), body);
  let final = false;

  function fileRow(f) {
    const b = h("button", { type: "button", class: "btn small", "data-path": f.path,
      title: `Download ${f.path}` }, "Download");
    b.addEventListener("click", () => act(b, () => download(
      `/v1/jobs/${id}/artifacts/file?path=${encodeURIComponent(f.path)}`, f.path.split("/").pop())));
    const s = h("button", { type: "button", class: "btn small", "data-share": f.path,
      title: `A link to ${f.path} that works without an account` }, "Share");
    s.addEventListener("click", () => share(s, f.path));
    return h("tr", null,
      h("td", null, h("code", null, f.path)),
      h("td", { class: "num" }, fmt.bytes(f.size)),
      h("td", null, h("code", { title: f.sha256 }, f.sha256.slice(0, 12))),
      h("td", { class: "row-actions" }, b, s));
  }

  const shareBox = h("div", { class: "share-box", hidden: true, "aria-live": "polite" });

  // a link that works without an account (for a colleague, a notebook, a CI job): its URL
  // is given once, when it is made; `rota share-link ls/rm` lists and revokes them
  async function share(b, path) {
    const link = await act(b, () => post(`/v1/jobs/${id}/share-links`, path ? { path } : {}));
    if (link === undefined) return;
    const url = new URL(link.url, location.href).href;
    const field = h("input", { type: "text", readonly: true, class: "mono", value: url,
      "aria-label": `Share link for ${path || "all the files"}` });
    const copy = h("button", { type: "button", class: "btn small" }, "Copy");
    copy.addEventListener("click", async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(url);
        toast("Link copied", "ok");
      } catch {
        toast("Select the link and copy it (the browser refused the clipboard)", "info");
      }
    });
    replace(shareBox, h("p", null, h("strong", null, path ? `Link to ${path}` : "Link to all the files"),
      ` — works without an account until ${fmt.stamp(link.expires_at)}; shown only now`),
    h("div", { class: "share-row" }, field, copy));
    shareBox.hidden = false;
    field.focus();
    field.select();
  }

  function paint(a) {
    const head = a.state === "saved"
      ? `${a.files.length} files, ${fmt.bytes(a.bytes || 0)}, saved ${fmt.stamp(a.saved_at)} to ${a.store}`
      : a.state === "pending" ? "Being saved…" : "Not saved";
    const parts = [h("p", { class: a.state === "failed" ? "error-box" : "muted" },
      head, a.error ? ` — ${a.error}` : "")];
    if (a.files.length) {
      const all = h("button", { type: "button", class: "btn small", "data-share": "" }, "Share all…");
      all.addEventListener("click", () => share(all, null));
      parts.push(h("div", { class: "actions" }, all), shareBox);
      parts.push(h("div", { class: "table-wrap" }, stacked(h("table", { class: "compact" },
        h("thead", null, h("tr", null, ["File", "Size", "sha256", ""].map((x) => h("th", { scope: "col" }, x)))),
        h("tbody", null, a.files.map(fileRow))))));
    }
    if (a.notes.length) parts.push(h("ul", { class: "muted small" }, a.notes.map((n) => h("li", null, n))));
    replace(body, parts);
  }

  async function refresh(job) {
    const outputs = (job.spec && job.spec.outputs) || [];
    el.hidden = !outputs.length;
    if (!outputs.length || final || !["completed", "failed", "cancelled", "timeout"].includes(job.state)) return;
    try {
      const a = await api(`/v1/jobs/${id}/artifacts`);
      final = a.state !== "pending";
      paint(a);
    } catch (e) {
      if (e.status !== 404) replace(body, h("p", { class: "error-box" }, e.detail));
    }
  }
  return { el, refresh };
}

// --- progress and metrics ------------------------------------------------------------------

/** How far the job's output says it has got: a bar and a line of text. */
function progressOf(p) {
  if (!p) return "–";
  const parts = [];
  if (p.step != null) parts.push(`step ${p.step}${p.total_steps ? `/${p.total_steps}` : ""}`);
  if (p.epoch != null) parts.push(`epoch ${p.epoch}${p.total_epochs ? `/${p.total_epochs}` : ""}`);
  if (p.rate) parts.push(p.rate >= 1 ? `${p.rate.toPrecision(3)} steps/s` : `${(1 / p.rate).toPrecision(3)} s/step`);
  if (p.eta_s != null) parts.push(`ETA ${fmt.duration(p.eta_s)}`);
  const text = h("span", { class: "progress-text" }, (p.fraction != null ? `${Math.round(p.fraction * 100)}% · ` : "") + parts.join(" · "));
  if (p.fraction == null) return text;
  return h("div", null, h("progress", { class: "job-progress", max: "1", value: String(p.fraction),
    "aria-label": `${Math.round(p.fraction * 100)}% done` }), text);
}

const SMOOTHING_KEY = "rota.smoothing";

function savedSmoothing() {
  try {
    const v = Number(localStorage.getItem(SMOOTHING_KEY));
    return v >= 0 && v < 1 ? v : 0;
  } catch {
    return 0;
  }
}

/**
 * The metrics read from the job's output, fetched incrementally with a cursor: one chart
 * per quantity, its train and validation series together, with a smoothing control.
 */
function metricsPanel(id) {
  const series = new Map();
  let after = 0;
  let smooth = savedSmoothing();
  const grid = h("div", { class: "metric-grid" });
  const smoothValue = h("output", { for: "m-smooth" }, smooth.toFixed(2));
  const slider = h("input", { type: "range", id: "m-smooth", min: "0", max: "0.99", step: "0.01",
    value: String(smooth), "aria-describedby": "m-smooth-hint" });
  slider.addEventListener("input", () => {
    smooth = Number(slider.value);
    smoothValue.textContent = smooth.toFixed(2);
    try {
      localStorage.setItem(SMOOTHING_KEY, String(smooth));
    } catch {
      /* private mode: this page only */
    }
    paint();
  });
  const el = h("section", { class: "card", "aria-labelledby": "h-metrics", hidden: true },
    h("div", { class: "card-head" }, h("h2", { id: "h-metrics" }, "Metrics"),
      h("div", { class: "smoothing push-end" }, h("label", { for: "m-smooth" }, "Smoothing"), slider, smoothValue,
        h("span", { id: "m-smooth-hint", class: "visually-hidden" }, "an exponential moving average, as TensorBoard's"))),
    grid);

  function paint() {
    const groups = new Map();
    for (const name of [...series.keys()].sort()) {
      const key = chartKey(name);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(name);
    }
    el.hidden = !groups.size;
    replace(grid, [...groups].map(([key, names]) => {
      const lines = names.map((name) => ({ name, points: series.get(name).map((p, i) => [p[0] ?? i, p[1]]) }));
      const lastOf = (one) => one.points[one.points.length - 1][1];
      const samples = lines.reduce((n, one) => n + one.points.length, 0);
      const said = lines.map((one) => {
        const v = one.points.map((p) => p[1]);
        return `${one.name}: last ${fmt3(lastOf(one))}, from ${fmt3(Math.min(...v))} to ${fmt3(Math.max(...v))}`;
      }).join("; ");
      const head = lines.length === 1 ? `last ${fmt3(lastOf(lines[0]))} · ${samples} samples`
        : `${samples} samples`;
      return h("figure", { class: "metric", "data-metric": key },
        h("h3", null, h("span", { class: "metric-name", title: key }, key), h("span", { class: "muted small" }, head)),
        lines.length > 1 ? h("ul", { class: "chart-legend" }, lines.map((one, i) =>
          h("li", { class: `series-${i % 4}`, "data-series": one.name }, h("span", { class: "swatch" }),
            `${one.name} `, h("span", { class: "muted" }, fmt3(lastOf(one)))))) : null,
        metricChart(lines, { label: said, smooth }));
    }));
  }
  return {
    el,
    async refresh() {
      let got = false;
      for (;;) {
        const r = await api(`/v1/jobs/${id}/metrics?after=${after}`);
        for (const [name, pts] of Object.entries(r.series)) {
          if (!series.has(name)) series.set(name, []);
          series.get(name).push(...pts);
          got = true;
        }
        after = r.next;
        if (!r.more) break;
      }
      if (got) paint();
    },
  };
}

function fmt3(v) {
  return Number.isInteger(v) ? String(v) : Number(v).toPrecision(4);
}

// --- the log panel --------------------------------------------------------------------------

function logPanel(id) {
  let lines = [];
  let partial = "";
  let offset = 0;
  let dropped = 0;
  let state = null;
  let finished = false;
  let stopped = false;
  let timer = null;

  const search = h("input", { id: "log-search", type: "search", placeholder: "Search the log", autocomplete: "off",
    spellcheck: "false" });
  const only = h("input", { id: "log-only", type: "checkbox" });
  const follow = h("input", { id: "log-follow", type: "checkbox", checked: true });
  const count = h("span", { class: "muted small", role: "status" });
  const pre = h("pre", { class: "log", tabindex: "0", "aria-label": "Job log", "aria-live": "off" });
  const note = h("p", { class: "muted small" });
  const el = h("section", { class: "card", "aria-labelledby": "h-log" },
    h("div", { class: "card-head" }, h("h2", { id: "h-log" }, "Log"), count),
    h("div", { class: "log-tools" },
      h("div", { class: "field inline grow" }, h("label", { for: "log-search", class: "sr-only" }, "Search the log"), search),
      h("label", { class: "check" }, only, " Only matching lines"),
      h("label", { class: "check" }, follow, " Follow")),
    pre, note);

  function all() {
    return partial ? [...lines, partial] : lines;
  }

  function paint() {
    const needle = search.value;
    const shown = all();
    if (!needle) {
      pre.textContent = shown.join("\n");
      count.textContent = `${lines.length + dropped} lines`;
    } else {
      const n = needle.toLowerCase();
      const frag = document.createDocumentFragment();
      let hits = 0;
      for (const line of shown) {
        const hit = line.toLowerCase().includes(n);
        if (hit) hits += 1;
        if (only.checked && !hit) continue;
        const div = h("span", { class: hit ? "log-line hit" : "log-line" }, ...highlighted(line, needle), "\n");
        frag.append(div);
      }
      pre.replaceChildren(frag);
      count.textContent = `${hits} matching line${hits === 1 ? "" : "s"} of ${shown.length}`;
    }
    if (!shown.length) pre.textContent = finished ? "(the log is empty)" : "(nothing written yet)";
    note.textContent = dropped ? `Showing the last ${MAX_LINES} lines; ${dropped} earlier lines are not shown.` : "";
    if (follow.checked) pre.scrollTop = pre.scrollHeight;
  }

  function take(text) {
    const parts = (partial + text).split("\n");
    partial = parts.pop();
    lines.push(...parts);
    if (lines.length > MAX_LINES) {
      dropped += lines.length - MAX_LINES;
      lines = lines.slice(-MAX_LINES);
    }
  }

  let painting = false;
  function paintSoon() {
    // a burst of events is painted once, on the next frame
    if (painting) return;
    painting = true;
    requestAnimationFrame(() => {
      painting = false;
      paint();
    });
  }

  let ctrl = null;
  // Server-sent events that follow the job until it ends; after a dropped connection the
  // stream starts again at the byte offset already shown, so nothing comes twice.
  async function stream() {
    timer = null;
    if (stopped || finished) return;
    ctrl = new AbortController();
    try {
      await streamEvents(`/v1/jobs/${id}/logs/stream?offset=${offset}`, (kind, data) => {
        const ev = JSON.parse(data);
        if (kind === "log") {
          take(ev.text);
          offset = ev.next;
        } else if (kind === "end") {
          finished = true;
        }
        paintSoon();
      }, { signal: ctrl.signal });
    } catch (e) {
      if (e.name === "AbortError" || stopped) return;
      if (e.status === 401 || e.status === 404) return;
      if (e.status === 403) {
        pre.textContent = `(not shown: ${e.detail})`;
        return;
      }
    }
    if (!finished && !stopped) timer = setTimeout(stream, LOG_RECONNECT_MS);
  }

  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(paint, 120);
  });
  only.addEventListener("change", paint);
  follow.addEventListener("change", () => {
    if (follow.checked) pre.scrollTop = pre.scrollHeight;
  });
  pre.addEventListener("scroll", () => {
    // scrolling up stops following; back at the bottom starts it again
    follow.checked = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
  });

  paint();
  stream();
  return {
    el,
    tail(n) {
      return all().filter((line) => line.trim()).slice(-n);
    },
    jobState(s) {
      const restarted = state !== null && fmt.TERMINAL.has(state) && !fmt.TERMINAL.has(s);
      state = s;
      if (restarted && finished && !stopped) {
        finished = false; // requeued: the log goes on
        stream();
      }
    },
    stop() {
      stopped = true;
      if (ctrl) ctrl.abort();
      clearTimeout(timer);
      clearTimeout(typing);
    },
  };
}
