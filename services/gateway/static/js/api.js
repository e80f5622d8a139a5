// Calls to the gateway: every request carries `Authorization: Bearer <key>`; errors become sentences.
import { t } from "./i18n.js";

const KEY = "conduit.key";
const WHO = "conduit.who";

/** The API key of this tab (sessionStorage: per tab, gone when the tab closes). */
export const auth = {
  get key() { return sessionStorage.getItem(KEY); },
  get who() {
    try { return JSON.parse(sessionStorage.getItem(WHO) || "null"); } catch { return null; }
  },
  set(key, who) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(WHO, JSON.stringify(who || {}));
  },
  clear() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(WHO); },
};

/** A failed call: HTTP `status` (0 = no connection), machine `code`, server `message`, `details`. */
export class ApiError extends Error {
  constructor(status, code, message, details = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** A readable sentence for an error (never raw JSON). */
export function errorSentence(err) {
  if (!(err instanceof ApiError)) return t("err.network");
  if (err.status === 0) return t("err.network");
  if (err.status === 401) return t("login.expired");
  const key = `err.${err.code}`;
  const known = t(key, { message: err.message });
  if (known !== key) return known;
  return t("err.generic", { status: err.status, message: err.message || err.code });
}

/** Announce that the key is no longer valid (the app shows the login form). */
function unauthorized() {
  auth.clear();
  window.dispatchEvent(new CustomEvent("conduit:unauthorized"));
}

async function errorOf(resp) {
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  const e = body && body.error ? body.error : {};
  return new ApiError(resp.status, e.code || `http_${resp.status}`, e.message || resp.statusText, e.details ?? null);
}

/**
 * Send a request; returns the parsed JSON body (or null for an empty one).
 * Options: method, json (body), headers, signal, key (use this key instead of the tab's),
 * raw (return the Response itself, for streams), quiet401 (do not log out on 401).
 * Throws ApiError (status 0 when the server could not be reached).
 */
export async function request(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const key = opts.key ?? auth.key;
  if (key) headers.set("Authorization", `Bearer ${key}`);
  let body;
  if (opts.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(opts.json);
  } else if (opts.body !== undefined) {
    body = opts.body;
  }
  let resp;
  try {
    resp = await fetch(path, { method: opts.method || (body ? "POST" : "GET"), headers, body, signal: opts.signal,
      // GETs skip the browser cache; a POST is never cached, and "no-store" would make the browser send
      // Cache-Control: no-cache, which tells Conduit to bypass its semantic cache (rule C1)
      cache: body ? "default" : "no-store" });
  } catch (exc) {
    if (exc && exc.name === "AbortError") throw exc;
    throw new ApiError(0, "network", String(exc));
  }
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (resp.status === 401 && !opts.quiet401) unauthorized();
    throw err;
  }
  if (opts.raw) return resp;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

/**
 * Check `key` with GET /v1/me -> {tenant_id, user_id, role, auth}.
 * A gateway without /v1/me (404) accepts any key: returns {user_id: "local"}.
 * Throws ApiError 401 when the key is refused.
 */
export async function verifyKey(key) {
  try {
    return await request("/v1/me", { key, quiet401: true });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return { tenant_id: "default", user_id: "local", role: "admin", auth: "none" };
    throw err;
  }
}

/** Trade a one-time login token for a key: POST /v1/login {token} -> {api_key, tenant_id, user_id, role}. */
export async function redeemToken(token) {
  return request("/v1/login", { json: { token }, key: "", quiet401: true });
}
