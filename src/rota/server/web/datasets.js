// The datasets page: the datasets the caller may read (GET /v1/datasets: their own and the
// shared ones; an admin's, all), each with its latest version; and one dataset's version
// (GET /v1/datasets/NAME?owner=OWNER&version=vN) with its files and the jobs that read it.
// The version shown lives in the address (#/datasets/OWNER/NAME?version=vN), so a job's
// page can link to the very version it read.

import { api, query } from "./api.js";
import { h, replace, update } from "./dom.js";
import * as fmt from "./format.js";
import { liveIndicator, poll, showFailure, stateBadge } from "./ui.js";

// datasets change when someone adds one: no need to ask often
const EVERY_MS = 10000;
/** The most files one version's table shows; the rest are counted. */
export const MAX_FILES = 500;
const VERSION = /^(v[0-9]{1,9}|[0-9a-f]{6,64})$/;

/** The page of a dataset, at a version ("v2") or its latest (none). */
export function datasetHref(owner, name, version) {
  const path = `#/datasets/${encodeURIComponent(owner)}/${encodeURIComponent(name)}`;
  return version ? `${path}?version=${encodeURIComponent(version)}` : path;
}

/** "alice/corpus:v2" (as a job's spec names it) -> {owner, name, version}; null if not so. */
export function parseRef(ref) {
  const m = /^([^/:\s]+)\/([^/:\s]+):(v[0-9]+)$/.exec(String(ref));
  return m ? { owner: m[1], name: m[2], version: m[3] } : null;
}

/** A link to the dataset a job's spec names, at that version (text when it cannot be read). */
export function refLink(ref) {
  const r = parseRef(ref);
  if (!r) return h("code", null, ref);
  return h("a", { href: datasetHref(r.owner, r.name, r.version), class: "dataset-link" }, ref);
}

function accessBadge(shared) {
  return h("span", { class: ["badge", shared ? "badge-default" : "badge-plain"], "data-shared": String(shared) },
    shared ? "shared" : "private");
}

function hereBadge(cached) {
  return h("span", { class: ["badge", cached ? "badge-ok" : "badge-plain"], "data-cached": String(cached) },
    cached ? "yes" : "no");
}

function added(d) {
  return h("span", null, h("span", { title: fmt.ago(d.created_at) }, fmt.stamp(d.created_at)),
    h("span", { class: "muted" }, ` by ${d.created_by}`));
}

// --- the list -----------------------------------------------------------------------------

const HEADS = ["Dataset", "Latest", "Versions", "Files", "Size", "Access", "On this machine", "Added", "Description"];
const CLASSES = ["c-name", "c-latest", "c-versions", "c-files num", "c-size num", "c-access", "c-here", "c-added",
  "c-desc"];

function cells(d) {
  const versions = [...d.versions].sort((a, b) => a - b);
  return [
    [h("a", { href: datasetHref(d.owner, d.name), class: "dataset-link" }, `${d.owner}/${d.name}`)],
    [`v${d.version}`],
    [h("span", null, versions.map((v, i) => [i ? ", " : null,
      h("a", { href: datasetHref(d.owner, d.name, `v${v}`), "aria-label": `${d.owner}/${d.name} version ${v}` },
        `v${v}`)]))],
    [String(d.files)],
    [h("span", { title: `${d.bytes} bytes` }, fmt.bytes(d.bytes))],
    [accessBadge(d.shared)],
    [hereBadge(d.cached)],
    [added(d)],
    [d.description ? h("div", { class: "dataset-desc" }, d.description) : "–"],
  ];
}

function renderList(root) {
  const live = liveIndicator();
  const summary = h("p", { class: "muted", id: "datasets-summary" });
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const empty = h("p", { class: "empty", hidden: true }, "No datasets yet. Add one with ",
    h("code", null, "rota dataset add NAME PATH"),
    " (a folder of files, or an s3:// prefix); a job reads it with ",
    h("code", null, "rota submit --dataset NAME"), ".");
  const body = h("tbody");
  const wrap = h("div", { class: "table-wrap datasets-wrap", hidden: true },
    h("table", { class: "datasets", "aria-describedby": "datasets-summary" },
      h("caption", { class: "sr-only" }, "Datasets you can read"),
      h("thead", null, h("tr", null, HEADS.map((x, i) => h("th", { scope: "col", class: CLASSES[i] }, x)))),
      body));
  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", null, "Datasets"), live.el),
    summary, error, empty, wrap));

  const rows = new Map(); // by owner/name: a refresh that changes nothing leaves the DOM alone
  function rowFor(d) {
    const key = `${d.owner}/${d.name}`;
    let tr = rows.get(key);
    if (!tr) {
      tr = h("tr", { "data-dataset": key }, CLASSES.map((c, i) =>
        i === 0 ? h("th", { scope: "row", class: c, "data-label": HEADS[i] })
          : h("td", { class: c, "data-label": HEADS[i] })));
      rows.set(key, tr);
    }
    cells(d).forEach((content, i) => update(tr.children[i], ...content));
    return tr;
  }

  function paint(list) {
    const keep = new Set(list.map((d) => `${d.owner}/${d.name}`));
    for (const [key, tr] of rows) {
      if (!keep.has(key)) {
        tr.remove();
        rows.delete(key);
      }
    }
    list.forEach((d, i) => {
      const tr = rowFor(d);
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
    empty.hidden = list.length > 0;
    wrap.hidden = list.length === 0;
    const n = list.length;
    const total = list.reduce((a, d) => a + d.bytes, 0);
    summary.textContent = n ? `${n} dataset${n === 1 ? "" : "s"} · ${fmt.bytes(total)} in their latest versions` : "";
  }

  async function refresh() {
    try {
      const answer = await api("/v1/datasets");
      live.ok();
      error.hidden = true;
      paint(answer.datasets);
    } catch (e) {
      showFailure(e, live, error);
    }
  }
  return poll(refresh, EVERY_MS);
}

// --- one dataset --------------------------------------------------------------------------

function overview(d) {
  const rows = [
    ["Version", `v${d.version} of ${d.versions.length}`],
    ["Digest", h("code", { class: "dataset-digest" }, d.digest)],
    ["Access", accessBadge(d.shared)],
    ["On this machine", hereBadge(d.cached)],
    ["Files", String(d.files)],
    ["Size", h("span", { title: `${d.bytes} bytes` }, fmt.bytes(d.bytes))],
    ["Source", d.source ? h("code", { class: "dataset-source" }, d.source) : "–"],
    ["Store", h("code", null, d.store)],
    ["Store key", h("code", { class: "dataset-key" }, d.key)],
    ["Added", added(d)],
    ["Description", d.description || "–"],
  ];
  return h("dl", { class: "kv dataset-facts" }, rows.flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

function filesTable(contents) {
  if (!contents.length) return h("p", { class: "muted" }, "No files.");
  const shown = contents.slice(0, MAX_FILES);
  const more = contents.length - shown.length;
  return [
    h("div", { class: "table-wrap" }, h("table", { class: "compact dataset-files" },
      h("caption", { class: "sr-only" }, "Files in this version"),
      h("thead", null, h("tr", null,
        h("th", { scope: "col" }, "Path"), h("th", { scope: "col", class: "num" }, "Size"),
        h("th", { scope: "col" }, "sha256"))),
      h("tbody", null, shown.map((f) => h("tr", { "data-path": f.path },
        h("td", { class: "c-path" }, h("code", null, f.path)),
        h("td", { class: "c-size num", title: `${f.size} bytes` }, fmt.bytes(f.size)),
        h("td", { class: "c-sha" }, h("code", { title: f.sha256 }, f.sha256.slice(0, 16)))))))),
    more > 0 ? h("p", { class: "muted dataset-more" }, `and ${more} more`) : null,
  ];
}

function jobsTable(jobs) {
  if (!jobs.length) return h("p", { class: "muted" }, "No job has read this version.");
  return h("div", { class: "table-wrap" }, h("table", { class: "compact dataset-jobs" },
    h("caption", { class: "sr-only" }, "Jobs that read this version"),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Job"), h("th", { scope: "col" }, "State"))),
    h("tbody", null, [...jobs].reverse().map((j) => h("tr", { "data-job": String(j.id) },
      h("td", null, h("a", { href: `#/jobs/${Number(j.id)}`, class: "job-link" }, `#${j.id}`)),
      h("td", null, stateBadge(j.state)))))));
}

function renderOne(root, owner, name, params) {
  const asked = VERSION.test(params.get("version") || "") ? params.get("version") : null;
  let want = asked; // null: the latest
  const live = liveIndicator();
  const error = h("p", { class: "error-box", role: "alert", hidden: true });
  const picker = h("select", { id: "dataset-version", name: "version" });
  const pickField = h("div", { class: "field inline push-end", hidden: true },
    h("label", { for: "dataset-version" }, "Version"), picker);
  const missing = h("p", { class: "error-box", hidden: true },
    "This version's files are missing from the store: jobs cannot read it.");
  const facts = h("div");
  const files = h("div");
  const filesNote = h("span", { class: "muted small" });
  const jobs = h("div");
  const body = h("div", { class: "page", hidden: true },
    missing,
    h("section", { class: "card", "aria-labelledby": "h-dataset" },
      h("h2", { id: "h-dataset" }, "Overview"), facts),
    h("section", { class: "card", "aria-labelledby": "h-dataset-files" },
      h("div", { class: "card-head" }, h("h2", { id: "h-dataset-files" }, "Files"), filesNote), files),
    h("section", { class: "card", "aria-labelledby": "h-dataset-jobs" },
      h("h2", { id: "h-dataset-jobs" }, "Jobs that read it"), jobs));
  replace(root, h("section", { class: "page" },
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/datasets" }, "← Datasets")),
    h("div", { class: "page-head" }, h("h1", null, `${owner}/${name}`), live.el, pickField),
    error, body));
  document.title = `${owner}/${name} · dataset · Rota`;

  let shownVersions = null;
  function paintPicker(d) {
    const versions = [...d.versions].sort((a, b) => b - a);
    const key = JSON.stringify(versions);
    if (key !== shownVersions) {
      shownVersions = key;
      const latest = Math.max(...versions);
      replace(picker, versions.map((v) => h("option", { value: `v${v}` },
        v === latest ? `v${v} (latest)` : `v${v}`)));
    }
    picker.value = `v${d.version}`;
    pickField.hidden = false;
  }

  let shown = null;
  let asking = 0;
  async function refresh() {
    asking += 1;
    const mine = asking;
    const version = want;
    try {
      const d = await api(`/v1/datasets/${encodeURIComponent(name)}${query({ owner, version: version || "latest" })}`);
      if (mine !== asking) return; // another version was chosen meanwhile
      live.ok();
      error.hidden = true;
      paintPicker(d);
      const text = JSON.stringify(d);
      if (text === shown) return;
      shown = text;
      missing.hidden = d.in_store;
      replace(facts, overview(d));
      replace(files, filesTable(d.contents));
      filesNote.textContent = `${d.contents.length} file${d.contents.length === 1 ? "" : "s"}, ${fmt.bytes(d.bytes)}`;
      replace(jobs, jobsTable(d.jobs));
      body.hidden = false;
    } catch (e) {
      if (mine !== asking) return;
      showFailure(e, live, error);
      if (e.status === 404) body.hidden = true;
    }
  }

  picker.addEventListener("change", () => {
    want = picker.value;
    // the address follows, for a reload or a link; no hashchange, so focus stays here
    history.replaceState(null, "", datasetHref(owner, name, want));
    refresh();
  });

  const stop = poll(refresh, EVERY_MS);
  return () => {
    stop();
    document.title = "Rota";
  };
}

/** #/datasets, or #/datasets/OWNER/NAME[?version=vN]. */
export function renderDatasets(root, parts, params) {
  if (parts.length === 2) return renderOne(root, parts[0], parts[1], params);
  return renderList(root);
}
