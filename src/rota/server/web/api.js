// Talking to /v1: the bearer token, JSON, and problem+json errors.

const TOKEN_KEY = "rota.token";

/** An API error: HTTP status plus the problem+json fields (title, detail, field). */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.title = problem.title || "";
    this.detail = problem.detail || this.message;
    this.field = problem.field || null;
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

const listeners = new Set();
/** Called with the ApiError whenever the API answers 401: the page asks for a token. */
export function onUnauthorized(fn) {
  listeners.add(fn);
}

async function problemOf(resp) {
  const text = await resp.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") return body;
  } catch {
    /* not JSON: fall through */
  }
  return { title: resp.statusText, detail: text.slice(0, 300) || `HTTP ${resp.status}` };
}

function authHeaders(accept) {
  const headers = { Accept: accept };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

async function failed(resp, quiet401) {
  const err = new ApiError(resp.status, await problemOf(resp));
  if (resp.status === 401 && !quiet401) for (const fn of listeners) fn(err);
  return err;
}

const UNREACHABLE = () => new ApiError(0, { title: "Unreachable", detail: "cannot reach the Rota daemon" });

/**
 * Read a server-sent event stream from /v1/... (fetch, not EventSource: it must send the
 * token). Calls onEvent(kind, data) per event; resolves when the server ends the stream,
 * throws ApiError (status 0 when the connection drops) or AbortError.
 */
export async function streamEvents(path, onEvent, { signal } = {}) {
  let resp;
  try {
    resp = await fetch(path, { headers: authHeaders("text/event-stream"), signal, cache: "no-store",
      credentials: "omit" });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw UNREACHABLE();
  }
  if (!resp.ok) throw await failed(resp, false);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw UNREACHABLE();
    }
    if (chunk.done) return;
    buf += chunk.value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let kind = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
      }
      if (data.length) onEvent(kind, data.join("\n"));
    }
  }
}

/** fetch /v1/...; returns parsed JSON or throws ApiError (status 0: the daemon is unreachable). */
export async function api(path, { method = "GET", body, signal, quiet401 = false } = {}) {
  const headers = authHeaders("application/json");
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw UNREACHABLE();
  }
  if (!resp.ok) throw await failed(resp, quiet401);
  if (resp.status === 204) return null;
  return resp.json();
}

export const post = (path, body) => api(path, { method: "POST", body });

/** Download /v1/... as a file named `name` (fetch, not a link: it must send the token). */
export async function download(path, name) {
  let resp;
  try {
    resp = await fetch(path, { headers: authHeaders("application/octet-stream"), cache: "no-store",
      credentials: "omit" });
  } catch {
    throw UNREACHABLE();
  }
  if (!resp.ok) throw await failed(resp, false);
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** Query string from an object; arrays repeat the key; empty values are left out. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null && v !== "") q.append(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
