// Sessions: the gateway's own list (GET/DELETE /v1/sessions) when it has one, else this browser's
// list (localStorage), per tenant and user. Titles renamed here are kept in localStorage either way.
import { request, ApiError } from "./api.js";

const MAX_SESSIONS = 100;

function scope(who) {
  return `${(who && who.tenant_id) || "default"}.${(who && who.user_id) || "local"}`;
}

function load(key) {
  try {
    const v = JSON.parse(localStorage.getItem(key) || "null");
    return v && typeof v === "object" ? v : null;
  } catch {
    return null;
  }
}

/** A session list for `who` ({tenant_id, user_id}); call `detect()` once after login. */
export class Sessions {
  constructor(who) {
    this.who = who;
    this.server = false;
    this.cache = [];
  }

  get localKey() { return `conduit.sessions.${scope(this.who)}`; }
  get titlesKey() { return `conduit.titles.${scope(this.who)}`; }

  /** Find out whether the gateway keeps sessions (404 on GET /v1/sessions: it does not). */
  async detect() {
    try {
      await request("/v1/sessions");
      this.server = true;
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
      this.server = false;
    }
  }

  local() {
    const all = load(this.localKey);
    return Array.isArray(all) ? all : [];
  }

  saveLocal(list) { localStorage.setItem(this.localKey, JSON.stringify(list.slice(0, MAX_SESSIONS))); }

  titled(list) {
    const titles = load(this.titlesKey) || {};
    return list.map((s) => ({ ...s, title: titles[s.id] || s.title }));
  }

  /** Sessions newest first: [{id, title, updated}] (also kept in `cache`). */
  async list() {
    let list;
    if (this.server) {
      const got = await request("/v1/sessions");
      list = got.sessions.map((s) => ({ id: s.session_id, title: s.title, updated: s.updated_at }));
    } else {
      list = this.local().sort((a, b) => b.updated - a.updated);
    }
    this.cache = this.titled(list);
    return this.cache;
  }

  /** The turns of session `id`: [{task_id, question, answer?, citations?}] (null when unknown). */
  async turns(id) {
    if (this.server) {
      try {
        return (await request(`/v1/sessions/${encodeURIComponent(id)}`)).turns;
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return null;
        throw err;
      }
    }
    const s = this.local().find((x) => x.id === id);
    return s ? s.tasks : null;
  }

  /** Note that task `taskId` (question `question`) joined session `id` (the gateway records it itself). */
  addTask(id, taskId, question) {
    if (this.server) return;
    const list = this.local();
    let s = list.find((x) => x.id === id);
    if (!s) {
      s = { id, title: question.slice(0, 40), tasks: [], updated: 0 };
      list.unshift(s);
    }
    if (!s.tasks.some((x) => x.task_id === taskId)) s.tasks.push({ task_id: taskId, question });
    s.updated = Date.now();
    this.saveLocal(list);
  }

  /** Rename session `id` (kept in this browser). */
  rename(id, title) {
    const titles = load(this.titlesKey) || {};
    titles[id] = title.trim().slice(0, 80);
    localStorage.setItem(this.titlesKey, JSON.stringify(titles));
  }

  /** Delete session `id` (on the gateway: its history and tasks too). */
  async remove(id) {
    if (this.server) await request(`/v1/sessions/${encodeURIComponent(id)}`, { method: "DELETE" });
    this.saveLocal(this.local().filter((x) => x.id !== id));
  }

  /** The cached entry of session `id`. */
  get(id) { return this.cache.find((x) => x.id === id); }
}
