// The submit form: checked in the browser first, then the server's problem+json shown at
// the field it names.

import { ApiError, post } from "./api.js";
import { ArgvError, shellFeatures, splitArgv } from "./argv.js";
import { h, replace } from "./dom.js";
import { toast } from "./ui.js";

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MEMORY = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$/i;
const DURATION = [/^\d+(\.\d+)?$/, /^\d+(:\d{1,2}){1,2}$/, /^(\s*\d+(\.\d+)?\s*[dhms])+\s*$/i];

/** The fields, in page order: id, label, and how the server names it in `field`. */
const FIELDS = {
  command: "Command",
  name: "Name",
  project: "Project",
  gpus: "GPUs",
  gpu_mem: "GPU memory",
  priority: "Priority",
  time_limit: "Time limit",
  env: "Environment",
  secret_env: "Secret environment",
  cwd: "Working directory",
  retries: "Retries",
  datasets: "Datasets",
  sweep: "Sweep",
};

const PROJECT = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

/** KEY=VALUE lines -> {env, errors}; blank lines and # comments are skipped. */
export function parseEnvLines(text, label) {
  const env = {};
  const errors = [];
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/\r$/, "");
    if (!line.trim() || line.trimStart().startsWith("#")) return;
    const eq = line.indexOf("=");
    const key = (eq === -1 ? line : line.slice(0, eq)).trim();
    if (eq === -1) errors.push(`${label}: line ${i + 1} (“${key}”) has no “=”; write KEY=VALUE`);
    else if (!ENV_KEY.test(key)) errors.push(`${label}: line ${i + 1}: “${key}” is not a valid variable name (letters, digits, _; not starting with a digit)`);
    else if (key in env) errors.push(`${label}: ${key} is given twice (lines ${env[key].line} and ${i + 1})`);
    else env[key] = { value: line.slice(eq + 1), line: i + 1 };
  });
  return { env: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v.value])), errors };
}

/** Read and check the form's values. Returns {spec, errors: {field: message}}. */
export function validate(v) {
  const errors = {};
  const spec = {};

  const cmd = v.command.trim();
  if (!cmd) errors.command = "Command: enter the program to run, e.g. python train.py --lr 3e-4";
  else if (v.shell) spec.command = [cmd];
  else {
    try {
      spec.command = splitArgv(cmd);
      if (!spec.command.length || !spec.command[0].trim()) errors.command = "Command: the program (first word) is empty";
    } catch (e) {
      if (!(e instanceof ArgvError)) throw e;
      errors.command = `Command: ${e.message}`;
    }
  }
  if (v.shell) spec.shell = true;

  const name = v.name.trim();
  if (name.length > 200) errors.name = `Name: at most 200 characters (this one has ${name.length})`;
  else if (name) spec.name = name;

  const project = v.project.trim();
  if (project && !PROJECT.test(project)) errors.project = `Project: “${project}” is not a project name (letters, digits, _ . : -, starting with a letter or digit, at most 64)`;
  else if (project) spec.project = project;

  const gpus = v.gpus.trim();
  if (gpus === "") errors.gpus = "GPUs: enter a number: 0 for CPU only, 0.25 or 0.5 to share a GPU, 1, 2, …";
  else if (!/^\d*\.?\d+$/.test(gpus)) errors.gpus = `GPUs: “${gpus}” is not a number (like 0.5, 1 or 2)`;
  else {
    const n = Number(gpus);
    if (n > 1024) errors.gpus = "GPUs: at most 1024";
    else if (n > 1 && !Number.isInteger(n)) errors.gpus = `GPUs: ${n} is not allowed: more than one GPU must be a whole number (fractions share one GPU)`;
    else spec.gpus = n;
  }

  const mem = v.gpu_mem.trim();
  if (mem && !MEMORY.test(mem)) errors.gpu_mem = `GPU memory: cannot read “${mem}” as a size (like 20G, 512M or 1.5GiB)`;
  else if (mem) spec.gpu_mem = mem;

  const pri = v.priority.trim();
  if (pri !== "") {
    if (!/^[-+]?\d+$/.test(pri)) errors.priority = `Priority: “${pri}” is not a whole number (lower runs first; 0 is the default)`;
    else if (Math.abs(Number(pri)) > 1_000_000) errors.priority = "Priority: between −1000000 and 1000000";
    else spec.priority = Number(pri);
  }

  const tl = v.time_limit.trim();
  if (tl && !DURATION.some((re) => re.test(tl))) errors.time_limit = `Time limit: cannot read “${tl}” as a duration (like 2h, 30m, 1h30m, 90s or 1:30:00)`;
  else if (tl && Number(tl) === 0) errors.time_limit = "Time limit: must be more than zero";
  else if (tl) spec.time_limit = tl;

  const env = parseEnvLines(v.env, "Environment");
  const secret = parseEnvLines(v.secret_env, "Secret environment");
  if (env.errors.length) errors.env = env.errors.join("; ");
  if (secret.errors.length) errors.secret_env = secret.errors.join("; ");
  const both = Object.keys(secret.env).filter((k) => k in env.env);
  if (both.length && !errors.secret_env) errors.secret_env = `Secret environment: ${both.join(", ")} also given in Environment; give each name once`;
  const allEnv = { ...env.env, ...secret.env };
  if (Object.keys(allEnv).length) spec.env = allEnv;
  if (Object.keys(secret.env).length) spec.secret_env = Object.keys(secret.env);

  const cwd = v.cwd.trim();
  if (cwd && !cwd.startsWith("/")) errors.cwd = `Working directory: give an absolute path (starting with /), not “${cwd}”`;
  else if (cwd) spec.cwd = cwd;

  const retries = v.retries.trim();
  if (retries !== "") {
    if (!/^\d+$/.test(retries) || Number(retries) > 100) errors.retries = "Retries: a whole number from 0 to 100";
    else spec.retries = Number(retries);
  }
  const datasets = v.datasets.split(/[\s,]+/).filter(Boolean);
  if (datasets.length) spec.datasets = datasets;

  // the grid, as `rota submit --sweep` takes it; the server checks each line as the CLI does
  const sweep = v.sweep.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  const noValue = sweep.find((l) => !/^[^=]+=.+/.test(l));
  if (noValue) errors.sweep = `Sweep: “${noValue}” is not key=values (like lr=1e-3,3e-4 or seed=1..5)`;

  if (v.hold) spec.hold = true;
  return { spec, errors, sweep };
}

/** The server's message without its place in the batch ("jobs[0]: "): the form sends one. */
export function withoutBatchPlace(detail) {
  return String(detail).replace(/^jobs\[\d+\]:\s*/, "");
}

/** The server's `field` ("jobs.0.gpu_mem", "env", "spec") -> one of our field ids, or null. */
export function fieldOf(serverField) {
  if (!serverField) return null;
  const parts = String(serverField).split(".").filter((p) => p !== "jobs" && !/^\d+$/.test(p));
  const f = parts[0];
  return f in FIELDS ? f : null;
}

export function renderSubmit(root, session) {
  const inputs = {};
  const errs = {};
  const field = (id, label, input, hint) => {
    inputs[id] = input;
    input.id = `s-${id}`;
    input.name = id;
    errs[id] = h("p", { class: "field-error", id: `s-${id}-error`, hidden: true });
    const hintEl = hint ? h("p", { class: "hint", id: `s-${id}-hint` }, hint) : null;
    input.setAttribute("aria-describedby", [hintEl && hintEl.id, errs[id].id].filter(Boolean).join(" "));
    return h("div", { class: "field", "data-field": id },
      h("label", { for: input.id }, label), input, hintEl, errs[id]);
  };

  const shell = h("input", { type: "checkbox", id: "s-shell", name: "shell" });
  const hold = h("input", { type: "checkbox", id: "s-hold", name: "hold" });
  const preview = h("div", { class: "argv-preview", "aria-live": "polite" });
  const summary = h("div", { class: "error-box", role: "alert", tabindex: "-1", hidden: true });
  const sendBtn = h("button", { type: "submit", class: "btn primary" }, "Submit job");

  const gpuList = h("datalist", { id: "gpu-choices" },
    ["0", "0.25", "0.5", "1", "2", "4", "8"].map((x) => h("option", { value: x })));

  const form = h("form", { class: "card submit-form", novalidate: true, "aria-labelledby": "h-submit" },
    summary,
    field("command", "Command", h("textarea", { rows: 2, spellcheck: "false", autocomplete: "off",
      class: "mono", placeholder: "python train.py --config configs/base.yaml --lr 3e-4", required: true }),
    "Split into arguments like a shell would: quote words with spaces (\"my file.txt\" or 'my file.txt'). " +
      "No pipes, redirects or $VARS unless you tick the box below."),
    h("label", { class: "check" }, shell, " Run through a shell (bash -c): the whole text is one script"),
    preview,
    h("div", { class: "form-grid" },
      field("name", "Name", h("input", { type: "text", autocomplete: "off", maxlength: "200", placeholder: "optional" })),
      field("project", "Project", h("input", { type: "text", autocomplete: "off", maxlength: "64", placeholder: "optional" }),
        "groups jobs in the queue, usage and workspaces"),
      field("gpus", "GPUs", h("input", { type: "text", inputmode: "decimal", autocomplete: "off", value: "1", list: "gpu-choices" }),
        "0 = CPU only; 0.25 / 0.5 share a GPU; 2, 4 … take whole GPUs"),
      field("gpu_mem", "GPU memory", h("input", { type: "text", autocomplete: "off", placeholder: "e.g. 20G" }),
        "needed on each GPU; optional"),
      field("priority", "Priority", h("input", { type: "text", inputmode: "numeric", autocomplete: "off", value: "0" }),
        "lower numbers run first"),
      field("time_limit", "Time limit", h("input", { type: "text", autocomplete: "off", placeholder: "e.g. 2h, 1h30m" }),
        "optional; the job is stopped after it")),
    gpuList,
    h("div", { class: "form-grid two" },
      field("env", "Environment", h("textarea", { rows: 3, spellcheck: "false", autocomplete: "off", class: "mono",
        placeholder: "WANDB_PROJECT=llm\nHF_HOME=/data/hf" }), "KEY=VALUE, one per line"),
      field("secret_env", "Secret environment", h("textarea", { rows: 3, spellcheck: "false", autocomplete: "off",
        class: "mono secret", placeholder: "HF_TOKEN=…" }),
      "KEY=VALUE, one per line; the values are never shown again, here or in the API")),
    h("details", { class: "advanced" },
      h("summary", null, "More options"),
      h("div", { class: "form-grid" },
        field("cwd", "Working directory", h("input", { type: "text", autocomplete: "off", spellcheck: "false",
          placeholder: "default: the daemon's" }), "an absolute path on the daemon's machine"),
        field("retries", "Retries", h("input", { type: "text", inputmode: "numeric", autocomplete: "off", placeholder: "0" }),
          "after a failure, with backoff"),
        h("div", { class: "field" }, h("span", { class: "label" }, "Start"),
          h("label", { class: "check" }, hold, " held (release it later)"))),
      h("div", { class: "form-grid two" },
        field("datasets", "Datasets", h("input", { type: "text", autocomplete: "off", spellcheck: "false",
          placeholder: "e.g. corpus:v3, alice/eval-set" }), "dataset versions the job reads (rota dataset list); comma-separated"),
        field("sweep", "Sweep", h("textarea", { rows: 2, spellcheck: "false", autocomplete: "off", class: "mono",
          placeholder: "lr=1e-3,3e-4\nseed=1..3" }),
        "one key=values per line: one job per combination, {key} in the command replaced"))),
    h("div", { class: "form-actions" }, sendBtn,
      session.user ? h("span", { class: "muted small" }, `as ${session.user}`) : null));

  replace(root, h("section", { class: "page" },
    h("div", { class: "page-head" }, h("h1", { id: "h-submit" }, "Submit a job")), form));

  const values = () => Object.fromEntries([
    ...Object.entries(inputs).map(([k, el]) => [k, el.value]),
    ["shell", shell.checked], ["hold", hold.checked]]);

  function showErrors(errors, formLevel = []) {
    for (const id of Object.keys(inputs)) {
      const msg = errors[id];
      errs[id].hidden = !msg;
      errs[id].style.visibility = "";
      errs[id].textContent = msg || "";
      if (msg) inputs[id].setAttribute("aria-invalid", "true");
      else inputs[id].removeAttribute("aria-invalid");
    }
    const ids = Object.keys(inputs).filter((id) => errors[id]);
    if (!ids.length && !formLevel.length) {
      summary.hidden = true;
      return;
    }
    const items = ids.map((id) => h("li", null, h("a", { href: `#/submit`, "data-focus": id,
      onclick: (ev) => { ev.preventDefault(); inputs[id].focus(); } }, FIELDS[id]), `: ${errors[id].replace(/^[^:]+: /, "")}`));
    replace(summary,
      h("strong", null, ids.length ? `Please fix ${ids.length === 1 ? "this field" : `these ${ids.length} fields`}:` : "The job was not accepted:"),
      h("ul", null, items, formLevel.map((m) => h("li", null, m))));
    summary.hidden = false;
    if (ids.length) inputs[ids[0]].focus();
    else summary.focus();
  }

  function paintPreview() {
    const text = inputs.command.value;
    if (!text.trim()) {
      replace(preview);
      return;
    }
    if (shell.checked) {
      replace(preview, h("span", { class: "muted small" }, "Runs as: "), h("code", { class: "argv-word" }, "bash"),
        h("code", { class: "argv-word" }, "-c"), h("code", { class: "argv-word" }, text.trim()));
      return;
    }
    try {
      const argv = splitArgv(text.trim());
      const warn = shellFeatures(text);
      replace(preview, h("span", { class: "muted small" }, `Runs as ${argv.length} argument${argv.length === 1 ? "" : "s"}: `),
        argv.map((a) => h("code", { class: "argv-word" }, a === "" ? "(empty)" : a)),
        warn.length ? h("p", { class: "warn small" }, `Not interpreted without a shell: ${warn.join(", ")}. ` +
          "They reach the program as typed. Tick “Run through a shell” if you meant them.") : null);
    } catch (e) {
      replace(preview, h("span", { class: "warn small" }, e.message));
    }
  }
  inputs.command.addEventListener("input", paintPreview);
  shell.addEventListener("change", paintPreview);

  // a field's message goes away as soon as it is fixed, keeping its room: "change" fires
  // as the field loses focus, which a click on Submit does at its mousedown, and a form
  // that moved up under the pointer then would swallow that click
  for (const [id, el] of Object.entries(inputs)) {
    el.addEventListener("change", () => {
      if (errs[id].hidden) return;
      const { errors } = validate(values());
      if (!errors[id]) {
        errs[id].style.visibility = "hidden";
        el.removeAttribute("aria-invalid");
      }
    });
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const { spec, errors, sweep } = validate(values());
    if (Object.keys(errors).length) {
      showErrors(errors);
      return;
    }
    showErrors({});
    sendBtn.disabled = true;
    sendBtn.textContent = "Submitting…";
    try {
      const out = await post("/v1/jobs", sweep.length ? { jobs: [spec], sweep } : { jobs: [spec] });
      if (out.jobs.length === 1) {
        toast(`Submitted job ${out.jobs[0].id}`, "ok");
        location.hash = `#/jobs/${out.jobs[0].id}`;
      } else {
        toast(`Submitted ${out.jobs.length} jobs (jobs ${out.jobs[0].id}–${out.jobs[out.jobs.length - 1].id})`, "ok");
        location.hash = "#/";
      }
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) return;
      const detail = withoutBatchPlace(e.detail);
      const id = fieldOf(e.field);
      if (id) showErrors({ [id]: detail });
      else showErrors({}, [e.status === 403 ? `Not allowed: ${detail}` : detail]);
    } finally {
      sendBtn.disabled = false;
      sendBtn.textContent = "Submit job";
    }
  });
  inputs.command.focus();
}
