// Formatting numbers, sizes, times and job states for people.

export const TERMINAL = new Set(["completed", "failed", "timeout", "cancelled"]);
export const ACTIVE = new Set(["starting", "running", "preempted"]);
export const STATES = ["pending", "held", "starting", "running", "preempted",
  "completed", "failed", "timeout", "cancelled"];

const UNITS = [["T", 2 ** 40], ["G", 2 ** 30], ["M", 2 ** 20], ["K", 2 ** 10]];

/** Bytes -> "20G", "1.5G", "512M" (binary units, as the CLI prints them). */
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  for (const [unit, mult] of UNITS) {
    if (n >= mult) {
      const v = n / mult;
      return (v >= 10 || v === Math.trunc(v) ? v.toFixed(0) : v.toFixed(1)) + unit;
    }
  }
  return `${n}B`;
}

/** Seconds -> "42s", "3m05s", "2h07m", "3d04h". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, "0")}h`;
}

export const now = () => Date.now() / 1000;

/** Unix seconds -> "3m ago" / "in 2m". */
export function ago(ts) {
  if (!ts) return "–";
  const d = now() - ts;
  if (Math.abs(d) < 5) return "just now";
  return d >= 0 ? `${duration(d)} ago` : `in ${duration(-d)}`;
}

/** Unix seconds -> local "2026-11-22 19:25:57". */
export function stamp(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000);
  const p = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Unix seconds -> "19:25:57" (today) for compact timelines. */
export function clock(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000);
  const p = (x) => String(x).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function percent(x) {
  if (x === null || x === undefined) return "–";
  return `${Math.round(x * 100)}%`;
}

/** 0 -> "CPU", 0.5 -> "0.5 GPU", 2 -> "2 GPUs". */
export function gpus(n) {
  if (!n) return "CPU";
  return `${+n.toFixed(3)} GPU${n > 1 ? "s" : ""}`;
}

/** How long a job has run (running) or ran (ended), or waited (pending). */
export function elapsed(job) {
  if (job.started_at && !job.ended_at) return now() - job.started_at;
  if (job.started_at && job.ended_at) return job.ended_at - job.started_at;
  return null;
}

/** Is the time in a job's life worth a "waiting" label rather than a run time? */
export function waiting(job) {
  return !job.started_at && !TERMINAL.has(job.state) ? now() - job.created_at : null;
}

/**
 * The pool a job runs in: its spec's (the detail view) or the list answer's; null there
 * means the default pool. Null when the answer does not say (a daemon without pools).
 */
export function pool(job) {
  const name = job.spec ? job.spec.pool : job.pool;
  if (name === undefined) return null;
  return name || "default";
}

/** An engine's hold on a job, in one line: "slurm:hpc · job 123 · queued". */
export function engineLine(e) {
  const id = e.id ? `job ${e.id}` : "no engine id yet";
  return `${e.backend} · ${id} · ${e.state || "not asked yet"}`;
}
