// Shared widgets: state badges, toasts, the confirm dialog, meters, polling.

import { h, replace } from "./dom.js";

export function stateBadge(state) {
  return h("span", { class: ["badge", `st-${state}`], "data-state": state }, state);
}

/** A short message in the corner; errors stay until dismissed, others fade after 5 s. */
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const close = h("button", { type: "button", class: "toast-close", "aria-label": "Dismiss" }, "×");
  const el = h("div", { class: ["toast", `toast-${kind}`], role: kind === "error" ? "alert" : "status" },
    h("span", null, message), close);
  close.addEventListener("click", () => el.remove());
  box.append(el);
  if (kind !== "error") setTimeout(() => el.remove(), 5000);
  return el;
}

/** A modal yes/no question; resolves true when confirmed. Escape or Cancel resolve false. */
export function confirmDialog({ title, message, ok = "OK", danger = false }) {
  const dlg = document.getElementById("confirm");
  const okBtn = h("button", { type: "submit", value: "ok", class: ["btn", danger ? "danger" : "primary"] }, ok);
  const cancel = h("button", { type: "submit", value: "cancel", class: "btn" }, "Keep it");
  replace(dlg,
    h("form", { method: "dialog", class: "dialog-body" },
      h("h2", { id: "confirm-title" }, title),
      h("p", null, message),
      h("div", { class: "dialog-actions" }, cancel, okBtn)));
  dlg.setAttribute("aria-labelledby", "confirm-title");
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
    dlg.returnValue = "";
    dlg.showModal();
    cancel.focus();
  });
}

/** A horizontal bar, 0..1; `parts` stacks several segments [{value, cls, label}]. */
export function meter(parts, { label, marker } = {}) {
  const bar = h("div", { class: "meter", role: "img", "aria-label": label || "" });
  let left = 0;
  for (const p of parts) {
    const w = Math.max(0, Math.min(1 - left, p.value));
    if (w <= 0) continue;
    const seg = h("span", { class: ["meter-fill", p.cls], title: p.label || "" });
    seg.style.setProperty("left", `${(left * 100).toFixed(2)}%`);
    seg.style.setProperty("width", `${(w * 100).toFixed(2)}%`);
    bar.append(seg);
    left += w;
  }
  if (marker !== undefined && marker > 0) {
    const m = h("span", { class: "meter-marker", title: "reserved by Rota jobs" });
    m.style.setProperty("left", `${Math.min(100, marker * 100).toFixed(2)}%`);
    bar.append(m);
  }
  return bar;
}

/**
 * Run `fn` now and then every `ms` while the tab is visible; a slow call never overlaps the
 * next. Returns stop().
 */
export function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  let busy = false;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (document.hidden) {
      timer = setTimeout(tick, ms);
      return;
    }
    busy = true;
    try {
      await fn();
    } finally {
      busy = false;
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  const onVisible = () => {
    if (!document.hidden && timer !== null && !busy) {
      clearTimeout(timer);
      tick();
    }
  };
  document.addEventListener("visibilitychange", onVisible);
  tick();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
  };
}

/** A small "live · updated 12:00:01" indicator that turns red when polling fails. */
export function liveIndicator() {
  const text = h("span", null, "connecting…");
  const el = h("span", { class: "live", role: "status" }, h("span", { class: "live-dot", "aria-hidden": "true" }), text);
  return {
    el,
    ok() {
      el.classList.remove("live-error");
      const d = new Date();
      text.textContent = `live · ${d.toLocaleTimeString([], { hour12: false })}`;
    },
    fail(err) {
      el.classList.add("live-error");
      text.textContent = err && err.status === 0 ? "daemon unreachable, retrying" : `error: ${err.detail || err.message}`;
    },
  };
}

/**
 * A refresh that failed: the live indicator turns red, and the API's own refusal goes in
 * `box` (an unreachable daemon is said by the indicator alone; a 401 asks for a token).
 */
export function showFailure(e, live, box) {
  if (e.status === 401) return;
  live.fail(e);
  if (e.status !== 0) {
    box.textContent = e.detail;
    box.hidden = false;
  }
}

/** Run an action on a button: disable it meanwhile, show the API's detail on failure. */
export async function act(button, fn, { success } = {}) {
  button.disabled = true;
  try {
    const out = await fn();
    if (success) toast(success, "ok");
    return out;
  } catch (e) {
    if (e.status === 401) return undefined;
    const what = e.status === 403 ? "Not allowed" : e.status === 409 ? "Cannot do that now" : "Failed";
    toast(`${what}: ${e.detail || e.message}`, "error");
    return undefined;
  } finally {
    button.disabled = false;
  }
}
