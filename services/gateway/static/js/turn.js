// One question and its answer: status line, streamed Markdown, approvals, sources and the record.
import { t } from "./i18n.js";
import { followTask } from "./sse.js";
import { request, errorSentence, ApiError } from "./api.js";
import { renderMarkdown, citedNumbers, citingSentence } from "./markdown.js";
import { kindBadge } from "./cards.js";
import { Record, renderRecord } from "./record.js";
import { artifactView } from "./files.js";
import { approvalPrompt } from "./approvals.js";

const TURNS = new WeakMap();

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/**
 * The banner text of a retrieval-only answer (null for an agent answer, and for rule O4's line said
 * alone: it says itself why no model answered, and no passages follow it).
 */
function retrievalNotice(done) {
  if (done.mode !== "retrieval_only" || !(done.answer || "").startsWith("（")) return null;
  const reason = done.fallback_reason || "";
  if (!reason || reason === "no_model_configured") return t("notice.retrieval_only");
  return t("notice.model_down", { reason: reason.split(":")[0].replace(/_/g, " ") });
}

/**
 * The short note of the reviewer pass (rule A22) under an answer, or null when none ran or it failed
 * (a failed review leaves the answer as it was; the execution record says why).
 */
function reviewNote(review) {
  if (!review || review.error) return null;
  if (review.revised) return t("review.revised", { n: review.checked });
  if (review.marked) return t("review.marked", { n: review.marked, total: review.checked });
  return t("review.checked", { n: review.checked });
}

/**
 * A retrieval-only answer's text without its first paragraph, the notice that no model answered
 * (services/orchestrator/agent/fallback.py writes it for API clients); the page shows that notice as
 * its banner instead, so it is not said twice.
 */
function withoutNotice(text) {
  const end = text.indexOf("\n\n");
  return text.startsWith("（") && end > 0 ? text.slice(end + 2) : text;
}

/** The Turn that owns DOM node `node` (or null). */
export function turnOf(node) {
  const art = node.closest(".turn");
  return art ? TURNS.get(art) : null;
}

/**
 * A question/answer pair bound to task `taskId`; `onEnd(turn)` runs after the terminal event.
 * `stored` ({answer, citations} from the session's history, or null) is shown when the task's
 * event log has expired.
 */
export class Turn {
  constructor(list, question, taskId, stored, onEnd) {
    this.taskId = taskId;
    this.stored = stored;
    this.text = "";
    this.evidence = new Map();
    this.citations = null;
    this.record = new Record();
    this.prompts = new Map();
    this.running = true;
    this.onEnd = onEnd;
    this.queries = [];
    this.abort = new AbortController();
    this.build(list, question);
    TURNS.set(this.node, this);
  }

  build(list, question) {
    this.node = el("article", "turn");
    this.node.dataset.taskId = this.taskId;
    const q = el("div", "q");
    q.append(el("div", "bubble", question));
    const a = el("div", "a");
    this.status = el("div", "status running");
    this.status.setAttribute("role", "status");
    this.status.setAttribute("aria-live", "polite");
    this.statusText = el("span", "status-text", t("phase.accepted"));
    this.status.append(el("span", "spinner"), this.statusText);
    this.approvals = el("div", "approvals");
    this.plan = el("ol", "plan");  // rule A25: the model's plan as a checklist
    this.plan.hidden = true;
    this.plan.setAttribute("aria-label", t("plan.title"));
    this.answer = el("div", "answer md");
    this.answer.setAttribute("role", "region");
    this.answer.setAttribute("aria-label", t("answer"));
    this.answer.setAttribute("aria-live", "polite");
    this.answer.setAttribute("aria-busy", "true");
    this.notice = el("div", "notice");
    this.notice.hidden = true;
    this.banner = el("div", "retrieval-banner");
    this.banner.setAttribute("role", "note");
    this.banner.hidden = true;
    this.origin = el("div", "origin-notes"); // "cached" and "from memory" notes (issue 20)
    this.origin.setAttribute("role", "note");
    this.origin.hidden = true;
    this.files = el("div", "files");
    this.sources = el("section", "sources");
    this.sources.hidden = true;
    this.details = el("details", "record");
    this.details.hidden = true;
    a.append(this.status, this.banner, this.origin, this.plan, this.approvals, this.answer, this.files, this.notice, this.sources, this.details);
    this.node.append(q, a);
    list.append(this.node);
  }

  setPhase(key) {
    if (this.running) this.statusText.textContent = t(key);
  }

  /** Follow the task's stream to its end (replays from the start: also used after a reload). */
  async follow() {
    try {
      await followTask(this.taskId, {
        signal: this.abort.signal,
        onEvent: (ev) => this.handle(ev.type, ev.data),
        onReconnecting: () => { this.statusText.textContent = t("phase.reconnecting"); this.status.classList.add("warn"); },
        onReconnected: () => { this.statusText.textContent = t("phase.reconnected"); this.status.classList.remove("warn"); },
      });
    } catch (err) {
      if (err && err.name === "AbortError") return;
      if (err instanceof ApiError && err.status === 404 && this.stored && this.stored.answer) {
        this.text = this.stored.answer;
        this.citations = this.stored.citations || [];
        this.finish("completed", null);
      } else if (err instanceof ApiError && err.status === 404) this.finish("failed", t("notice.expired"));
      else this.finish("failed", errorSentence(err));
    }
  }

  /** Apply one stream event {type, data}. */
  handle(type, d) {
    this.record.add(type, d);
    switch (type) {
      case "step.started": this.setPhase(["final", "review", "plan"].includes(d.phase) ? `phase.${d.phase}` : "phase.model"); break;
      case "answer.delta":
        this.text += d.text;
        this.setPhase("phase.writing");
        this.paint();
        break;
      case "answer.reset": this.text = ""; this.paint(); break;
      case "tool.requested":
        if (d.arguments && d.arguments.query) this.queries.push(d.arguments.query);
        this.setPhase(`phase.tool.${d.tool}`);
        break;
      case "tool.approval_required": this.ask(d); break;
      case "worker.started": this.setPhase("phase.team"); break;
      case "tool.completed": {
        const p = this.prompts.get(d.call_id);
        if (p) p.resolve(t(d.error_code === "rejected_by_user" ? "approval.rejected" : d.error_code === "approval_expired" ? "approval.expired" : "approval.approved"));
        for (const artifact of d.artifacts || []) this.files.append(artifactView(artifact, this.taskId));
        break;
      }
      case "plan.created": case "plan.revised": this.showPlan(d.steps); break;
      case "plan.step_done": {
        const li = this.plan.children[d.index];
        if (li) { li.dataset.status = d.status; li.firstChild.textContent = d.status === "done" ? "✓" : "✗"; }
        break;
      }
      case "evidence": for (const item of d.items) this.evidence.set(item.index, item); break;
      case "trace": if (d.phase === "memory" && d.data && d.data.recalled) this.showMemory(d.data.recalled); break;
      case "task.completed":
        this.text = retrievalNotice(d) ? withoutNotice(d.answer) : d.answer;
        this.citations = d.citations;
        if (d.memory && d.memory.length) this.showMemory(d.memory);
        if (d.cache === "hit") this.showCached();
        if (retrievalNotice(d)) { this.banner.textContent = retrievalNotice(d); this.banner.hidden = false; }
        this.finish("completed", reviewNote(d.review), d.latency_ms);
        break;
      case "task.failed": this.finish("failed", t("err.failed", { message: d.message || d.code })); break;
      case "task.cancelled": this.finish("cancelled", t("notice.cancelled")); break;
      default: break;
    }
    this.paintRecord();
  }

  /** The long-term memory items the model was given, each marked "from memory". */
  showMemory(items) {
    if (this.origin.querySelector(".memory-note")) return;
    const box = el("div", "memory-note");
    box.append(el("span", "origin-badge", t("note.memory")));
    const ul = el("ul");
    for (const m of items) ul.append(el("li", `memory-${m.type}`, m.text));
    box.append(ul);
    this.origin.append(box);
    this.origin.hidden = false;
  }

  /** The answer was replayed from the semantic cache. */
  showCached() {
    if (this.origin.querySelector(".cached-note")) return;
    const box = el("div", "cached-note");
    box.append(el("span", "origin-badge", t("note.cached")), el("span", "", t("note.cached_detail")));
    this.origin.prepend(box);
    this.origin.hidden = false;
  }

  ask(d) {
    this.setPhase("phase.approval");
    const prompt = approvalPrompt(d.task_id || this.taskId, d, (decision) => { this.record.decided(d.call_id, decision); this.paintRecord(); });
    this.prompts.set(d.call_id, prompt);
    this.approvals.append(prompt.node);
  }

  paint() {
    if (this.painting) return;
    this.painting = true;
    requestAnimationFrame(() => {
      this.painting = false;
      const scroller = this.node.parentElement;
      const following = scroller && scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
      this.answer.innerHTML = renderMarkdown(this.text);
      if (following && this.running) scroller.scrollTop = scroller.scrollHeight; // keep up with the text unless the reader scrolled away
      for (const chip of this.answer.querySelectorAll(".chip")) {
        chip.setAttribute("aria-expanded", "false");
        if (!this.evidence.has(Number(chip.dataset.cite))) chip.classList.add("chip-unknown");
      }
    });
  }

  paintRecord() {
    if (this.recordPending) return;
    this.recordPending = true;
    requestAnimationFrame(() => { this.recordPending = false; renderRecord(this.details, this.record); });
  }

  paintSources() {
    const numbers = this.citations ? this.citations.map((c) => c.index) : citedNumbers(this.text);
    const items = numbers.map((n) => this.evidence.get(n) || (this.citations || []).find((c) => c.index === n)).filter(Boolean);
    this.sources.replaceChildren();
    if (!items.length) { this.sources.hidden = true; return; }
    this.sources.append(el("h3", "", t("sources")));
    const ol = el("ol");
    for (const item of items) {
      const li = el("li");
      const chip = el("button", "chip", String(item.index));
      chip.type = "button";
      chip.dataset.cite = String(item.index);
      chip.setAttribute("aria-expanded", "false");
      li.append(chip, kindBadge(item.kind || (item.url ? "web" : "original")), el("span", "src-title", item.title));
      if (item.locator) li.append(el("span", "src-loc", item.locator));
      ol.append(li);
    }
    this.sources.append(ol);
    this.sources.hidden = false;
  }

  /** The evidence and highlight words for citation chip number `n`. */
  lookup(n) {
    const item = this.evidence.get(n) || (this.citations || []).find((c) => c.index === n);
    if (!item) return null;
    return { item, needles: [citingSentence(this.text, n), ...this.queries] };
  }

  /** Show the plan's steps (rule A25) as a checklist: ✓ done, ✗ found nothing, · still to do. */
  showPlan(steps) {
    this.plan.replaceChildren(...steps.map((s) => {
      const li = el("li", "plan-step");
      li.dataset.status = s.status;
      li.append(el("span", "plan-mark", s.status === "done" ? "✓" : s.status === "failed" ? "✗" : "·"), el("span", null, s.goal));
      return li;
    }));
    this.plan.hidden = false;
  }

  finish(state, notice, latencyMs) {
    if (!this.running) return;
    this.running = false;
    this.status.classList.remove("running", "warn");
    this.status.classList.add(`done-${state}`);
    const label = t(`done.${state}`);
    this.statusText.textContent = latencyMs != null ? `${label} · ${(latencyMs / 1000).toFixed(1)} s` : label;
    if (notice) { this.notice.textContent = notice; this.notice.hidden = false; this.notice.className = `notice notice-${state}`;
      this.notice.setAttribute("role", state === "failed" ? "alert" : "note"); }
    for (const p of this.prompts.values()) p.resolve(t("approval.closed"));
    this.answer.setAttribute("aria-busy", "false");
    this.paint();
    this.paintSources();
    this.paintRecord();
    this.node.dataset.state = state;
    if (this.onEnd) this.onEnd(this);
  }

  /** Ask the gateway to cancel (POST /v1/tasks/{id}/cancel); the stream then ends with task.cancelled. */
  async stop() {
    if (!this.running) return;
    this.statusText.textContent = t("phase.stopping");
    try {
      await request(`/v1/tasks/${encodeURIComponent(this.taskId)}/cancel`, { method: "POST" });
    } catch (err) {
      if (!(err instanceof ApiError && err.code === "task_already_finished")) {
        this.notice.textContent = errorSentence(err);
        this.notice.hidden = false;
      }
    }
  }

  /** Stop following (leaving the session); the task itself goes on. */
  detach() { this.abort.abort(); }
}
