// Server-Sent Events over fetch (EventSource cannot send an Authorization header).
import { request, ApiError } from "./api.js";

const TERMINAL = new Set(["task.completed", "task.failed", "task.cancelled"]);
const RETRY_MS = [500, 1000, 2000, 4000, 5000];
const SILENCE_MS = 45000; // 3 x the gateway's 15 s heartbeat (CONDUIT_SSE_HEARTBEAT_S): a stream this quiet is dead

/** Parse SSE wire text into events; returns [events, rest] where rest is an incomplete tail. */
export function parseChunk(buffer) {
  const events = [];
  const blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
  const rest = blocks.pop();
  for (const block of blocks) {
    const ev = { id: null, event: "message", data: [] };
    for (const line of block.split(/\r\n|\n|\r/)) {
      if (!line || line.startsWith(":")) continue;
      const at = line.indexOf(":");
      const field = at < 0 ? line : line.slice(0, at);
      let value = at < 0 ? "" : line.slice(at + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") ev.id = value;
      else if (field === "event") ev.event = value;
      else if (field === "data") ev.data.push(value);
    }
    if (ev.data.length || ev.id !== null) events.push({ id: ev.id === null ? null : Number(ev.id), event: ev.event, data: ev.data.join("\n") });
  }
  return [events, rest];
}

/**
 * Follow a task's events from after `after` until its terminal event.
 * Handlers: onEvent({id, type, data}) for each new event (ids strictly increase: a replayed
 * id is skipped), onReconnecting(attempt) when the connection dropped, onReconnected().
 * Reconnects by itself with `Last-Event-ID`. Resolves with the terminal event (null when the
 * gateway answers 204: the task ended at or before `after`);
 * rejects with ApiError on 401/404 or when `signal` aborts.
 */
export async function followTask(taskId, { after = 0, onEvent, onReconnecting, onReconnected, signal } = {}) {
  let last = after;
  let attempt = 0;
  for (;;) {
    let dropped = false;
    const conn = new AbortController(); // this connection only: the watchdog cuts a silent stream
    const cut = () => conn.abort();
    if (signal) signal.addEventListener("abort", cut, { once: true });
    let watchdog = setTimeout(cut, SILENCE_MS);
    try {
      const resp = await request(`/v1/tasks/${encodeURIComponent(taskId)}/events`, {
        raw: true, signal: conn.signal, headers: { Accept: "text/event-stream", "Last-Event-ID": String(last) },
      });
      if (attempt > 0 && onReconnected) onReconnected();
      attempt = 0;
      if (resp.status === 204) return null; // the task ended at or before `last`: its terminal event was read
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        clearTimeout(watchdog);
        watchdog = setTimeout(cut, SILENCE_MS);
        if (done) break;
        buffer += value;
        const [events, rest] = parseChunk(buffer);
        buffer = rest;
        for (const ev of events) {
          if (ev.id !== null && ev.id <= last) continue;
          if (ev.id !== null) last = ev.id;
          let data;
          try { data = JSON.parse(ev.data); } catch { continue; }
          const item = { id: ev.id, type: ev.event, data };
          if (onEvent) onEvent(item);
          if (TERMINAL.has(ev.event)) {
            reader.cancel().catch(() => {});
            return item;
          }
        }
      }
      dropped = true; // ended without a terminal event (server restart or proxy cut)
    } catch (err) {
      if (signal && signal.aborted) throw err;
      if (err instanceof ApiError && err.status !== 0 && err.status < 500) throw err;
      dropped = true; // network error, 5xx, or the watchdog cut a silent stream
    } finally {
      clearTimeout(watchdog);
      if (signal) signal.removeEventListener("abort", cut);
    }
    if (dropped) {
      attempt += 1;
      if (onReconnecting) onReconnecting(attempt);
      await sleep(RETRY_MS[Math.min(attempt - 1, RETRY_MS.length - 1)], signal);
    }
  }
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(timer); reject(new DOMException("aborted", "AbortError")); }, { once: true });
  });
}
