// Small charts with no library: SVG line charts (a GPU's last hour, a job's metrics) and
// horizontal bar charts (evaluation runs side by side).

import { h, s } from "./dom.js";

const W = 240;
const H = 44;
const PAD = 2;

/**
 * points: [[t, value], ...] sorted by t; max: the value at the top of the box.
 * Returns an <svg> with an area, a line, and a <title> for screen readers and hover.
 */
export function sparkline(points, { max = 1, label = "", cls = "", window = 3600, end } = {}) {
  const svg = s("svg", {
    class: ["spark", cls],
    viewBox: `0 0 ${W} ${H}`,
    preserveAspectRatio: "none",
    role: "img",
    "aria-label": label,
    focusable: "false",
  });
  svg.append(s("title", null, label));
  svg.append(s("line", { class: "spark-base", x1: 0, x2: W, y1: H - PAD, y2: H - PAD }));
  if (!points.length || !(max > 0)) return svg;
  const t1 = end ?? points[points.length - 1][0];
  const t0 = t1 - window;
  const x = (t) => (((t - t0) / window) * W).toFixed(1);
  const y = (v) => (H - PAD - (Math.min(Math.max(v, 0), max) / max) * (H - 2 * PAD)).toFixed(1);
  const shown = points.filter(([t]) => t >= t0);
  if (!shown.length) return svg;
  // a step line: a value holds until the next sample
  const pts = [];
  shown.forEach(([t, v], i) => {
    if (i > 0) pts.push(`${x(t)},${y(shown[i - 1][1])}`);
    pts.push(`${x(t)},${y(v)}`);
  });
  pts.push(`${x(t1)},${y(shown[shown.length - 1][1])}`);
  const first = x(shown[0][0]);
  svg.append(s("polygon", {
    class: "spark-area",
    points: `${first},${H - PAD} ${pts.join(" ")} ${x(t1)},${H - PAD}`,
  }));
  svg.append(s("polyline", { class: "spark-line", points: pts.join(" "), fill: "none",
    "vector-effect": "non-scaling-stroke" }));
  return svg;
}

// --- a job's metrics over steps ------------------------------------------------------------

const MW = 600;
const MH = 220;
const M = { left: 70, right: 12, top: 12, bottom: 34 };

/** About n round tick values covering lo..hi (1, 2 or 5 times a power of ten apart). */
export function niceTicks(lo, hi, n = 4) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** A tick's text: short (1.5k, 2M; 0.001, 3.2e-5) and never cut. */
export function tickText(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${Number((v / 1e6).toPrecision(3))}M`;
  if (a >= 1e4) return `${Number((v / 1e3).toPrecision(3))}k`;
  if (a !== 0 && a < 1e-3) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

/**
 * TensorBoard's smoothing: an exponential moving average, debiased at the start (so the
 * first points are not pulled towards 0). weight 0 leaves the values as they are.
 */
export function smoothed(points, weight) {
  if (!(weight > 0)) return points;
  let last = 0;
  return points.map(([x, v], i) => {
    last = last * weight + (1 - weight) * v;
    return [x, last / (1 - weight ** (i + 1))];
  });
}

/**
 * Metrics over steps in one chart with axes: series [{name, points: [[step, value], ...]}]
 * share it (train and validation loss), each in its own colour, raw and (when ``smooth``
 * > 0) smoothed. Hovering (or moving along it with the arrow keys) shows each series' value
 * at the nearest step. Returns a <div> holding the <svg> and its readout.
 */
export function metricChart(series, { label = "", smooth = 0 } = {}) {
  const all = series.flatMap((x) => x.points);
  const svg = s("svg", { class: "metric-chart", viewBox: `0 0 ${MW} ${MH}`, role: "img",
    "aria-label": label, focusable: "false" });
  svg.append(s("title", null, label));
  const readout = h("div", { class: "chart-readout", "aria-live": "polite", hidden: true });
  const box = h("div", { class: "chart-box", tabindex: "0", "aria-label": `${label}; arrow keys read the values` }, svg, readout);
  if (!all.length) return box;
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - Math.abs(y0 || 1) * 0.1, y1 + Math.abs(y1 || 1) * 0.1];
  const pad = (y1 - y0) * 0.05;
  [y0, y1] = [y0 - pad, y1 + pad];
  const [pl, pr, pt, pb] = [M.left, MW - M.right, M.top, MH - M.bottom];
  const X = (v) => pl + ((v - x0) / (x1 - x0)) * (pr - pl);
  const Y = (v) => pb - ((v - y0) / (y1 - y0)) * (pb - pt);

  const yAxis = s("g", { class: "axis axis-y" });
  for (const v of niceTicks(y0, y1)) {
    yAxis.append(s("line", { class: "chart-grid", x1: pl, x2: pr, y1: Y(v).toFixed(1), y2: Y(v).toFixed(1) }),
      s("text", { class: "tick", x: pl - 8, y: (Y(v) + 6).toFixed(1) }, tickText(v)));
  }
  const xAxis = s("g", { class: "axis axis-x" },
    s("line", { class: "axis-line", x1: pl, x2: pr, y1: pb, y2: pb }));
  const xTicks = niceTicks(x0, x1, 5).filter((v) => Number.isInteger(v) || x1 - x0 < 5);
  for (const v of xTicks) {
    xAxis.append(s("line", { class: "axis-line", x1: X(v).toFixed(1), x2: X(v).toFixed(1), y1: pb, y2: pb + 4 }),
      s("text", { class: "tick", x: X(v).toFixed(1), y: MH - 10 }, tickText(v)));
  }
  svg.append(yAxis, xAxis, s("text", { class: "axis-name", x: pr, y: MH - 10 }, "step"));

  const path = (pts) => pts.map(([a, b]) => `${X(a).toFixed(1)},${Y(b).toFixed(1)}`).join(" ");
  series.forEach((one, i) => {
    const g = s("g", { class: `series series-${i % 4}`, "data-series": one.name });
    if (one.points.length === 1) {  // one sample: a point, not an empty box
      g.append(s("circle", { class: "chart-point", cx: X(one.points[0][0]).toFixed(1), cy: Y(one.points[0][1]).toFixed(1), r: 4 }));
    } else if (smooth > 0) {
      g.append(s("polyline", { class: "chart-line raw", fill: "none", points: path(one.points) }),
        s("polyline", { class: "chart-line line-smoothed", fill: "none", points: path(smoothed(one.points, smooth)) }));
    } else {
      g.append(s("polyline", { class: "chart-line", fill: "none", points: path(one.points) }));
    }
    svg.append(g);
  });

  // the readout: each series' value at the step nearest the pointer
  const cursor = s("line", { class: "chart-cursor off", x1: 0, x2: 0, y1: pt, y2: pb });
  svg.append(cursor);
  const steps = [...new Set(xs)].sort((a, b) => a - b);
  const at = (step) => series.map((one) => {
    const pts = smooth > 0 && one.points.length > 1 ? smoothed(one.points, smooth) : one.points;
    let best = null;
    for (const p of pts) if (best === null || Math.abs(p[0] - step) < Math.abs(best[0] - step)) best = p;
    return [one.name, best];
  });
  let shown = -1;
  const show = (k) => {
    shown = Math.max(0, Math.min(steps.length - 1, k));
    const step = steps[shown];
    cursor.setAttribute("x1", X(step).toFixed(1));
    cursor.setAttribute("x2", X(step).toFixed(1));
    cursor.classList.remove("off");
    readout.replaceChildren(h("strong", null, `step ${step}`),
      ...at(step).map(([name, p], i) => h("span", { class: `readout-item series-${i % 4}` }, `${name} ${p ? tickText(p[1]) : "–"}`)));
    readout.hidden = false;
  };
  const hide = () => {
    cursor.classList.add("off");
    readout.hidden = true;
  };
  svg.addEventListener("mousemove", (ev) => {
    const r = svg.getBoundingClientRect();
    const step = x0 + (((ev.clientX - r.left) / r.width) * MW - pl) / (pr - pl) * (x1 - x0);
    let k = 0;
    steps.forEach((v, i) => { if (Math.abs(v - step) < Math.abs(steps[k] - step)) k = i; });
    show(k);
  });
  svg.addEventListener("mouseleave", hide);
  box.addEventListener("keydown", (ev) => {
    if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
    ev.preventDefault();
    show(shown < 0 ? steps.length - 1 : shown + (ev.key === "ArrowRight" ? 1 : -1));
  });
  box.addEventListener("blur", hide);
  return box;
}

/**
 * The chart a metric goes in: train and validation series of one quantity share one
 * ("loss", "val_loss", "train/loss", "val/loss", "eval_loss" all go under "loss").
 */
export function chartKey(name) {
  return name.replace(/^(train|training|val|valid|validation|eval|test)[/_.]/i, "")
    .replace(/[/_.](train|training|val|valid|validation|eval|test)$/i, "");
}

/**
 * The span a bar chart's axis covers: 0..1 when every value is a score in that range, so
 * charts compare at a glance (a whisker past an end is cut there); otherwise from 0 (or
 * the lowest value ± its error, below 0) to the highest.
 */
export function barScale(items) {
  const values = items.map((i) => i.value);
  if (values.every((v) => v >= 0 && v <= 1)) return [0, 1];
  const ends = items.flatMap((i) => [i.value - (i.err || 0), i.value + (i.err || 0)]);
  const [lo, hi] = [Math.min(0, ...ends), Math.max(0, ...ends)];
  return hi > lo ? [lo, hi] : [lo, lo + 1];
}

function placed(el, from, to) {
  const [a, b] = [Math.max(0, Math.min(from, to)), Math.min(100, Math.max(from, to))];
  el.style.setProperty("left", `${a.toFixed(2)}%`);
  el.style.setProperty("width", `${Math.max(0, b - a).toFixed(2)}%`);
  return el;
}

/**
 * One horizontal bar per item {label, value, text, err, cls, best, title}: a row of HTML
 * (its label stays readable at any width) with the bar on a shared scale, ± err as a
 * whisker. `label` is the text alternative: the chart is one image to a screen reader, so
 * it should carry the values.
 */
export function barChart(items, { label = "" } = {}) {
  const [lo, hi] = barScale(items);
  const pos = (v) => ((v - lo) / (hi - lo)) * 100;
  const el = h("div", { class: "bar-chart", role: "img", "aria-label": label });
  for (const it of items) {
    const track = h("span", { class: "bar-track" },
      placed(h("span", { class: ["bar", it.cls, it.best && "bar-best"] }), pos(0), pos(it.value)));
    if (it.err) track.append(placed(h("span", { class: "bar-err" }), pos(it.value - it.err), pos(it.value + it.err)));
    el.append(h("div", { class: "bar-row", title: it.title || null },
      h("span", { class: "bar-label" }, it.label), track, h("span", { class: "bar-value" }, it.text)));
  }
  return el;
}
