// Small SVG line charts (sparklines) for a GPU's last hour. No library: a polyline in a box.

import { s } from "./dom.js";

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
