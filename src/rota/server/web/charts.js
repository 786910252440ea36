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

const LW = 600;
const LH = 150;

/**
 * A metric over steps: points [[x, value], ...] in x order. The y axis spans the values'
 * range; the chart is an <svg> whose <title> names the metric and its last value.
 */
export function lineChart(points, { label = "" } = {}) {
  const svg = s("svg", { class: "metric-chart", viewBox: `0 0 ${LW} ${LH}`, preserveAspectRatio: "none",
    role: "img", "aria-label": label, focusable: "false" });
  svg.append(s("title", null, label));
  if (!points.length) return svg;
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) [y0, y1] = [y0 - 1, y1 + 1];
  const x = (v) => (x1 === x0 ? LW / 2 : ((v - x0) / (x1 - x0)) * (LW - 2 * PAD) + PAD).toFixed(1);
  const y = (v) => (LH - PAD - ((v - y0) / (y1 - y0)) * (LH - 2 * PAD)).toFixed(1);
  for (const f of [0.25, 0.5, 0.75]) {
    svg.append(s("line", { class: "chart-grid", x1: 0, x2: LW, y1: (LH * f).toFixed(1), y2: (LH * f).toFixed(1) }));
  }
  svg.append(s("polyline", { class: "chart-line", fill: "none", "vector-effect": "non-scaling-stroke",
    points: points.map(([a, b]) => `${x(a)},${y(b)}`).join(" ") }));
  return svg;
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
