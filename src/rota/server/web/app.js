// The dashboard's entry point: hash routes, sign-in with an API token, the colour theme.

import { api, ApiError, getToken, onUnauthorized, setToken } from "./api.js";
import { h, replace } from "./dom.js";
import { renderDatasets } from "./datasets.js";
import { renderEvals } from "./evals.js";
import { renderGpus } from "./gpus.js";
import { renderJob } from "./job.js";
import { renderPipelines } from "./pipelines.js";
import { renderPools } from "./pools.js";
import { renderUsage } from "./usage.js";
import { renderQueue } from "./queue.js";
import { renderSubmit } from "./submit.js";

const main = document.getElementById("main");
let stopView = null;
let signingIn = false;
export const session = { user: null, admin: false, via: null };

// --- routes -------------------------------------------------------------------------------

/** "#/jobs/42?x=1" -> {parts: ["jobs", "42"], query: URLSearchParams} */
export function parseHash(hash = location.hash) {
  const raw = hash.replace(/^#\/?/, "");
  const [path, qs = ""] = raw.split("?", 2);
  return { parts: path.split("/").filter(Boolean), query: new URLSearchParams(qs) };
}

/** A part of the address as written, or as is when it is not valid percent-encoding. */
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function route() {
  const { parts, query } = parseHash();
  const [first = "jobs", second] = parts;
  if (first === "jobs" && second && /^\d+$/.test(second)) return ["jobs", (el) => renderJob(el, Number(second))];
  if (first === "jobs") return ["jobs", (el) => renderQueue(el, query)];
  if (first === "gpus") return ["gpus", (el) => renderGpus(el)];
  if (first === "pools") return ["pools", (el) => renderPools(el)];
  if (first === "usage") return ["usage", (el) => renderUsage(el, query)];
  if (first === "evals") return ["evals", (el) => renderEvals(el, query)];
  if (first === "pipelines") return ["pipelines", (el) => renderPipelines(el, second && decodeURIComponent(second))];
  if (first === "datasets") return ["datasets", (el) => renderDatasets(el, parts.slice(1).map(decoded), query)];
  if (first === "submit") return ["submit", (el) => renderSubmit(el, session)];
  return [null, (el) => replace(el, h("section", { class: "page" },
    h("h1", null, "Not found"),
    h("p", null, "No page here. ", h("a", { href: "#/jobs" }, "Go to the queue"), ".")))];
}

function show() {
  if (signingIn) return;
  if (stopView) stopView();
  stopView = null;
  const [nav, render] = route();
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  stopView = render(main) || null;
}

/** Re-render when only the query part changed without scrolling or refocusing. */
let lastPath = null;
function onHashChange() {
  const path = location.hash.split("?")[0];
  const samePage = path === lastPath;
  lastPath = path;
  show();
  if (!samePage) {
    window.scrollTo(0, 0);
    main.focus({ preventScroll: true });
  }
}

// --- signing in ---------------------------------------------------------------------------

function tokenScreen(reason) {
  signingIn = true;
  if (stopView) stopView();
  stopView = null;
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off",
    spellcheck: "false", required: true, "aria-describedby": "token-help token-error" });
  const error = h("p", { id: "token-error", class: "field-error", role: "alert" }, reason || "");
  const form = h("form", { class: "card signin", novalidate: true },
    h("h1", null, "Sign in to Rota"),
    h("p", { id: "token-help", class: "muted" },
      "This daemon wants an API token. Make one on its machine with ",
      h("code", null, "rota token create --user NAME"),
      " and paste it here. It is kept for this tab only."),
    h("div", { class: "field" },
      h("label", { for: "token" }, "API token"), input, error),
    h("div", { class: "form-actions" }, h("button", { type: "submit", class: "btn primary" }, "Sign in")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) {
      error.textContent = "Paste a token first.";
      input.focus();
      return;
    }
    setToken(token);
    const ok = await loadWhoami();
    if (ok) {
      signingIn = false;
      show();
      main.focus({ preventScroll: true });
    } else {
      setToken(null);
      error.textContent = "That token was not accepted (unknown or revoked).";
      input.select();
    }
  });
  replace(main, h("section", { class: "page narrow" }, form));
  input.focus();
}

/** Ask who we are. False on 401; true otherwise (an older daemon may not know /v1/whoami). */
async function loadWhoami() {
  try {
    const me = await api("/v1/whoami", { quiet401: true });
    Object.assign(session, me);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return false;
    // 404 (no such endpoint) or unreachable: carry on; each page shows its own errors
  }
  paintWho();
  return true;
}

function paintWho() {
  const who = document.getElementById("who");
  const out = document.getElementById("signout");
  if (session.user) {
    replace(who, h("span", { class: "who-user", title: `signed in via ${session.via || "?"}` }, session.user),
      session.admin ? h("span", { class: "badge badge-admin" }, "admin") : null);
    who.hidden = false;
  } else {
    who.hidden = true;
  }
  out.hidden = !getToken();
}

onUnauthorized((err) => {
  if (signingIn) return;
  const had = Boolean(getToken());
  setToken(null);
  paintWho();
  tokenScreen(had ? `The token stopped working: ${err.detail}` : "");
});

document.getElementById("signout").addEventListener("click", () => {
  setToken(null);
  Object.assign(session, { user: null, admin: false, via: null });
  paintWho();
  tokenScreen("Signed out.");
});

// --- theme --------------------------------------------------------------------------------

const THEMES = ["auto", "light", "dark"];
function applyTheme(theme) {
  if (theme === "auto") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
  const btn = document.getElementById("theme-toggle");
  const label = `Colour theme: ${theme === "auto" ? "automatic" : theme}`;
  btn.setAttribute("aria-label", label);
  btn.title = label;
  btn.dataset.theme = theme;
}
function currentTheme() {
  try {
    return THEMES.includes(localStorage.getItem("rota.theme")) ? localStorage.getItem("rota.theme") : "auto";
  } catch {
    return "auto";
  }
}
document.getElementById("theme-toggle").addEventListener("click", () => {
  const next = THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length];
  try {
    localStorage.setItem("rota.theme", next);
  } catch {
    /* private mode: the choice lasts until reload */
  }
  applyTheme(next);
});
applyTheme(currentTheme());

document.getElementById("skip-link").addEventListener("click", (ev) => {
  ev.preventDefault();
  main.focus();
});

// --- start --------------------------------------------------------------------------------

window.addEventListener("hashchange", onHashChange);
(async () => {
  if (!location.hash) history.replaceState(null, "", "#/jobs");
  lastPath = location.hash.split("?")[0];
  if (await loadWhoami()) show();
  else tokenScreen("");
})();
