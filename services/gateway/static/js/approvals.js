// Inline approval prompts for tool.approval_required: approve / edit / reject, with a countdown.
import { t } from "./i18n.js";
import { request, errorSentence } from "./api.js";
import { highlightPython } from "./markdown.js";

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/**
 * A prompt element for approval event `ev` ({call_id, tool, arguments, reason, arguments_digest, expires_at})
 * of task `taskId`. `onDecided(decision)` is called after the gateway accepted it (202).
 * Returns {node, resolve(label)}: resolve closes the prompt with a final label (e.g. on tool.completed).
 */
export function approvalPrompt(taskId, ev, onDecided) {
  const node = el("section", "approval");
  node.setAttribute("role", "group");
  node.setAttribute("aria-label", `${t("approval.title")}: ${ev.tool}`);
  node.dataset.callId = ev.call_id;
  const head = el("div", "approval-head");
  head.append(el("span", "approval-title", t("approval.title")), el("span", "rec-tool", ev.tool));
  const countdown = el("span", "approval-countdown");
  head.append(countdown);
  node.append(head);
  if (ev.reason) node.append(el("div", "approval-reason", ev.reason));

  const args = ev.arguments || {};
  const isCode = typeof args.code === "string";
  const view = el("pre", "code");
  const code = el("code", isCode ? "lang-python" : "json");
  if (isCode) code.append(highlightPython(args.code)); else code.textContent = JSON.stringify(args, null, 2);
  view.append(code);
  const editor = el("textarea", "approval-editor");
  editor.hidden = true;
  editor.spellcheck = false;
  editor.setAttribute("aria-label", t("record.args"));
  editor.value = isCode ? args.code : JSON.stringify(args, null, 2);
  node.append(view, editor);

  const comment = el("input", "approval-comment");
  comment.type = "text";
  comment.maxLength = 1000;
  comment.placeholder = t("approval.comment");
  comment.setAttribute("aria-label", t("approval.comment"));
  const buttons = el("div", "approval-buttons");
  const approve = el("button", "btn btn-primary", t("approval.approve"));
  const edit = el("button", "btn", t("approval.edit"));
  const reject = el("button", "btn btn-danger", t("approval.reject"));
  for (const b of [approve, edit, reject]) b.type = "button";
  approve.dataset.action = "approve";
  edit.dataset.action = "edit";
  reject.dataset.action = "reject";
  buttons.append(approve, edit, reject);
  const message = el("div", "approval-message");
  message.setAttribute("role", "alert");
  node.append(comment, buttons, message);

  let done = false;
  const expires = Date.parse(ev.expires_at);
  const tick = () => {
    if (done) return;
    const left = Math.max(0, Math.round((expires - Date.now()) / 1000));
    countdown.textContent = left > 0 ? t("approval.expires", { s: left }) : t("approval.expired");
    if (left <= 0) { for (const b of [approve, edit, reject]) b.disabled = true; }
  };
  tick();
  const timer = setInterval(tick, 1000);

  function resolve(label) {
    if (done) return;
    done = true;
    clearInterval(timer);
    node.classList.add("decided");
    countdown.remove();
    head.querySelector(".approval-title").textContent = label;
    node.replaceChildren(head);
  }

  async function send(decision) {
    const body = { decision, arguments_digest: ev.arguments_digest };
    if (comment.value.trim()) body.comment = comment.value.trim();
    if (decision === "edit") {
      if (editor.hidden) {
        editor.hidden = false;
        view.hidden = true;
        message.textContent = t("approval.editing");
        editor.focus();
        return;
      }
      try {
        body.arguments = isCode ? { ...args, code: editor.value } : JSON.parse(editor.value);
      } catch (exc) {
        message.textContent = String(exc.message || exc);
        return;
      }
      delete body.arguments_digest;
    }
    for (const b of [approve, edit, reject]) b.disabled = true;
    try {
      await request(`/v1/tasks/${encodeURIComponent(taskId)}/approvals/${encodeURIComponent(ev.call_id)}`, { json: body });
      const label = { approve: "approval.approved", edit: "approval.edited", reject: "approval.rejected" }[decision];
      resolve(t(label));
      if (onDecided) onDecided(decision === "approve" ? "approved" : decision === "edit" ? "edited" : "rejected");
    } catch (err) {
      message.textContent = errorSentence(err);
      for (const b of [approve, edit, reject]) b.disabled = false;
    }
  }
  approve.addEventListener("click", () => send("approve"));
  edit.addEventListener("click", () => send("edit"));
  reject.addEventListener("click", () => send("reject"));
  return { node, resolve };
}
