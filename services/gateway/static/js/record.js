// The execution record of one answer: steps, model calls and tool calls, folded under the answer.
import { t } from "./i18n.js";
import { highlightPython } from "./markdown.js";
import { kindBadge } from "./cards.js";

/** Collects a task's events into steps, calls and totals. */
export class Record {
  constructor() {
    this.steps = new Map(); // step -> {step, phase, llm}
    this.calls = new Map(); // call_id -> {call_id, tool, arguments, reason, step, outcome, duration_ms, queue_ms, run_ms, evidence, approval}
    this.unclaimed = [];    // calls completed since the last evidence event
    this.currentStep = 0;
    this.usage = null;
    this.latencyMs = null;
    this.traces = [];
  }

  /** Take one stream event {type, data}. */
  add(type, d) {
    if (type === "step.started") {
      this.currentStep = d.step;
      if (!this.steps.has(d.step)) this.steps.set(d.step, { step: d.step, phase: d.phase, llm: null });
    } else if (type === "trace" && d.phase === "llm") {
      const s = this.steps.get(d.data.step ?? this.currentStep);
      if (s) s.llm = d.data;
    } else if (type === "trace" && d.phase === "tool") {
      const c = this.calls.get(d.data.call_id);
      if (c) Object.assign(c, { queue_ms: d.data.queue_ms, run_ms: d.data.run_ms, attempts: d.data.attempts });
    } else if (type === "tool.requested") {
      this.calls.set(d.call_id, { call_id: d.call_id, tool: d.tool, arguments: d.arguments, reason: d.reason,
        step: this.currentStep, outcome: null, evidence: [], approval: null });
    } else if (type === "worker.started") { // team mode: a worker's task, shown as the supervisor's call
      this.calls.set(d.call_id, { call_id: d.call_id, tool: `${t("record.worker")} · ${d.worker}`, worker: d.task_id,
        arguments: { task: d.task }, reason: null, step: this.currentStep, outcome: null, evidence: [], approval: null });
    } else if (type === "worker.completed") {
      const c = this.calls.get(d.call_id);
      if (c) {
        Object.assign(c, { outcome: d.outcome, duration_ms: d.duration_ms, error_code: d.error_code, output: d.summary || null });
        this.unclaimed.push(c);
      }
    } else if (type === "tool.approval_required") {
      const c = this.calls.get(d.call_id);
      if (c) c.approval = "pending";
    } else if (type === "tool.completed") {
      const c = this.calls.get(d.call_id);
      if (c) {
        Object.assign(c, { outcome: d.outcome, duration_ms: d.duration_ms, error_code: d.error_code,
          output: d.output ?? null, artifacts: d.artifacts || [] });
        if (d.approval) c.approval = d.approval; // the person's decision, also when the events are read again later
        else if (c.approval === "pending") c.approval = d.error_code === "rejected_by_user" ? "rejected" : d.error_code === "approval_expired" ? "expired" : "approved";
        if (d.arguments) c.arguments = d.arguments; // the edited arguments it ran with
        this.unclaimed.push(c);
      }
    } else if (type === "evidence") {
      // a worker's evidence comes renumbered in the supervisor's pool of all its workers: it is
      // nobody's alone, so only the sources list shows it
      const takers = this.unclaimed.filter((c) => c.tool !== "code_exec" && !c.worker);
      const to = takers.length ? takers[takers.length - 1] : null;
      if (to) to.evidence.push(...d.items);
      this.unclaimed = [];
    } else if (type === "task.completed") {
      this.usage = d.usage;
      this.latencyMs = d.latency_ms;
    }
  }

  /** Note a decision this page made on an approval (shown in the record). */
  decided(callId, decision) {
    const c = this.calls.get(callId);
    if (c) c.approval = decision;
  }
}

const secs = (ms) => (ms == null ? "–" : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

function argumentsView(call) {
  const box = el("div", "rec-args");
  const args = { ...(call.arguments || {}) };
  if (typeof args.code === "string") {
    const pre = el("pre", "code");
    const code = el("code", "lang-python");
    code.append(highlightPython(args.code));
    pre.append(code);
    delete args.code;
    box.append(pre);
  }
  delete args.reason;
  const simple = Object.values(args).every((v) => v === null || ["string", "number", "boolean"].includes(typeof v));
  if (simple) {
    const dl = el("dl", "rec-kv");
    for (const [k, v] of Object.entries(args)) dl.append(el("dt", "", k), el("dd", "", String(v)));
    if (dl.childElementCount) box.append(dl);
  } else {
    box.append(el("pre", "json", JSON.stringify(args, null, 2)));
  }
  return box;
}

// a tool's answer that it found nothing: an ordinary outcome the agent goes on from, not a failure
const NOTHING_FOUND = new Set(["kb_no_results", "no_results", "no_readable_results", "empty_page"]);

/** The outcome a call is shown with: ok, error, timeout, empty (nothing found) or pending. */
function shownOutcome(call) {
  if (call.outcome === "error" && NOTHING_FOUND.has(call.error_code)) return "empty";
  return call.outcome || "pending";
}

function callView(call) {
  const outcome = shownOutcome(call);
  const li = el("li", `rec-call${call.worker ? " rec-worker" : ""} outcome-${outcome}`);
  const head = el("div", "rec-head");
  head.append(el("span", "rec-tool", call.tool));
  const status = outcome === "pending" ? t("record.pending") : t(`outcome.${outcome}`);
  head.append(el("span", `pill pill-${outcome}`, status));
  if (call.approval && call.approval !== "pending") head.append(el("span", "pill pill-approval", t(`approval.${call.approval}`)));
  const times = [];
  if (call.run_ms != null || call.duration_ms != null) times.push(`${t("record.run")} ${secs(call.run_ms ?? call.duration_ms)}`);
  if (call.queue_ms != null) times.push(`${t("record.queue")} ${secs(call.queue_ms)}`);
  if (times.length) head.append(el("span", "rec-times", times.join(" · ")));
  li.append(head);
  if (call.reason) li.append(el("div", "rec-reason", `${t("record.reason")}：${call.reason}`));
  li.append(argumentsView(call));
  if (call.error_code) {
    const key = `tool_err.${call.error_code}`;
    const sentence = t(key);
    li.append(el("div", outcome === "empty" ? "rec-note" : "rec-error",
      sentence === key ? call.error_code : `${sentence} (${call.error_code})`));
  }
  if (call.output) {
    li.append(el("div", "rec-label", t("record.output")));
    li.append(el("pre", "rec-stdout", call.output));
  }
  if (call.artifacts && call.artifacts.length) {
    li.append(el("div", "rec-files", `${t("record.files")}：${call.artifacts.map((a) => a.name).join("、")}`));
  }
  if (call.evidence.length) {
    const out = el("div", "rec-output");
    out.append(el("div", "rec-label", `${t("record.output")} · ${call.evidence.length} ${t(call.evidence.length === 1 ? "record.evidence_one" : "record.evidence_n")}`));
    const ol = el("ol", "rec-evidence");
    for (const item of call.evidence) {
      const row = el("li");
      const chip = el("button", "chip", String(item.index));
      chip.type = "button";
      chip.dataset.cite = String(item.index);
      row.append(chip, kindBadge(item.kind), el("span", "", ` ${item.title}${item.locator ? ` ${item.locator}` : ""}`));
      ol.append(row);
    }
    out.append(ol);
    li.append(out);
  }
  return li;
}

/** The summary line: tool calls, total time, tokens. */
export function recordSummary(rec) {
  const parts = [t("record")];
  if (rec.calls.size) parts.push(`${rec.calls.size} ${t(rec.calls.size === 1 ? "record.tools_one" : "record.tools")}`);
  if (rec.latencyMs != null) parts.push(`${t("record.total")} ${secs(rec.latencyMs)}`);
  if (rec.usage && rec.usage.total_tokens) parts.push(`${rec.usage.total_tokens.toLocaleString()} ${t("record.tokens")}`);
  return parts.join(" · ");
}

/** Fill `details` (a <details> element) with the record; keeps it open or closed as the user left it. */
export function renderRecord(details, rec) {
  const summary = el("summary", "", recordSummary(rec));
  const body = el("ol", "rec-steps");
  // a step with neither a model call nor a tool call (retrieval-only mode's answer) has nothing to show
  const steps = [...rec.steps.values()].sort((a, b) => a.step - b.step)
    .filter((s) => s.llm || [...rec.calls.values()].some((c) => c.step === s.step));
  for (const s of steps) {
    const li = el("li", "rec-step");
    const head = el("div", "rec-step-head");
    head.append(el("span", "rec-step-n", t("record.step", { n: s.step })));
    if (s.llm) {
      const l = s.llm;
      const bits = [`${t("record.model")}`];
      if (l.first_token_s != null) bits.push(`${t("record.first_token")} ${secs(l.first_token_s * 1000)}`);
      if (l.total_s != null) bits.push(`${t("record.total")} ${secs(l.total_s * 1000)}`);
      if (l.retries) bits.push(`${t("record.retries")} ${l.retries}`);
      if (l.prompt_tokens != null) bits.push(`${l.prompt_tokens}+${l.completion_tokens} ${t("record.tokens")}`);
      head.append(el("span", "rec-times", bits.join(" · ")));
    }
    li.append(head);
    const calls = [...rec.calls.values()].filter((c) => c.step === s.step);
    if (calls.length) {
      const ol = el("ol", "rec-calls");
      for (const c of calls) ol.append(callView(c));
      li.append(ol);
    }
    body.append(li);
  }
  details.replaceChildren(summary, body);
  details.hidden = steps.length === 0;
}
