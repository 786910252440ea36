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
