// Documents of the tenant's knowledge base: drag-and-drop or pick txt / md / html / pdf files, see status, delete.
import { t } from "./i18n.js";
import { request, errorSentence } from "./api.js";

const TEXT_TYPES = /\.(txt|md|markdown|html?)$/i;
const PDF_TYPE = /\.pdf$/i;
const POLL_MS = 1000;
const POLL_MAX = 300;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/** The text to index from file `file`: HTML is parsed inertly (DOMParser runs no script) and its body text kept. */
export async function fileText(file) {
  const raw = await file.text();
  if (!/\.html?$/i.test(file.name)) return raw;
  const doc = new DOMParser().parseFromString(raw, "text/html");
  for (const n of doc.querySelectorAll("script, style, noscript, template")) n.remove();
  return (doc.body ? doc.body.innerText || doc.body.textContent : "").replace(/\n{3,}/g, "\n\n").trim();
}

function statusText(view) {
  if (view.status === "ingested") return view.chunks === 1 ? t("docs.ingested_one") : t("docs.ingested", { n: view.chunks ?? 0 });
  if (view.status === "failed") return `${t("docs.failed")}${view.reason ? `：${view.reason}` : ""}`;
  return t(`docs.${view.status}`);
}

/** Wire the documents dialog (`dialog`), its file input and drop zone; `dropTargets` also accept dropped files. */
export function installDocuments(dialog, dropTargets) {
  const list = dialog.querySelector(".docs-list");
  const uploads = dialog.querySelector(".docs-uploads");
  const input = dialog.querySelector("input[type=file]");
  const zone = dialog.querySelector(".dropzone");

  let generation = 0; // a list read older than the last refresh or delete is dropped (out-of-order replies)

  // A document shows once: in its upload row while that upload is in flight, in its list row after (with its status).
  // An upload row carries its document's id once the gateway accepted it, and `data-done` once it is over.
  async function refresh() {
    const mine = ++generation;
    try {
      const got = await request("/v1/documents");
      if (mine !== generation) return;
      const inFlight = new Set([...uploads.querySelectorAll("li[data-document-id]:not([data-done])")].map((u) => u.dataset.documentId));
      const shown = got.documents.filter((view) => !inFlight.has(view.document_id));
      list.replaceChildren(...shown.map(row));
      if (!shown.length && !uploads.children.length) list.append(el("li", "docs-empty", t("docs.empty")));
      const listed = new Set(shown.map((view) => view.document_id));
      for (const u of uploads.querySelectorAll("li[data-done]")) if (listed.has(u.dataset.documentId)) u.remove();
    } catch (err) {
      if (mine === generation) list.replaceChildren(el("li", "docs-error", errorSentence(err)));
    }
  }

  function row(view) {
    const li = el("li", `doc doc-${view.status}`);
    li.dataset.documentId = view.document_id;
    li.append(el("span", "doc-title", view.title), el("span", `pill doc-status status-${view.status}`, statusText(view)));
    const del = el("button", "btn btn-ghost icon small", "×");
    del.type = "button";
    del.setAttribute("aria-label", `${t("docs.delete")} ${view.title}`);
    del.title = t("docs.delete");
    del.disabled = view.status === "deleting";
    del.addEventListener("click", async () => {
      if (!confirm(t("docs.delete_confirm", { title: view.title }))) return;
      try {
        await request(`/v1/documents/${encodeURIComponent(view.document_id)}`, { method: "DELETE" });
        generation += 1; // a list read sent before the delete must not bring the row back
        li.remove();
      } catch (err) {
        li.append(el("span", "docs-error", errorSentence(err)));
      }
    });
    li.append(del);
    return li;
  }

  async function upload(file) {
    const li = el("li", "upload");
    const status = el("span", "pill doc-status status-queued", t("docs.reading"));
    const bar = el("progress");
    bar.max = 4;
    bar.value = 1;
    li.append(el("span", "doc-title", file.name), status, bar);
    uploads.append(li);
    const set = (key, value, cls) => { status.textContent = key; bar.value = value; status.className = `pill doc-status status-${cls}`; };
    const pdf = PDF_TYPE.test(file.name);
    if (!pdf && !TEXT_TYPES.test(file.name)) { set(t("docs.unsupported"), 0, "failed"); bar.remove(); return; }
    try {
      const title = file.name.replace(/\.[^.]+$/, "");
      let accepted;
      if (pdf) { // raw PDF body: the gateway extracts its text
        set(t("docs.uploading"), 2, "queued");
        const query = new URLSearchParams({ title, source: file.name });
        accepted = await request(`/v1/documents?${query}`, { method: "POST", body: file, headers: { "Content-Type": "application/pdf" } });
      } else {
        const text = await fileText(file);
        set(t("docs.uploading"), 2, "queued");
        accepted = await request("/v1/documents", { json: { title, text, source: file.name } });
      }
      li.dataset.documentId = accepted.document_id;
      set(t("docs.queued"), 3, "queued");
      for (let i = 0; i < POLL_MAX; i += 1) {
        const view = await request(`/v1/documents/${encodeURIComponent(accepted.document_id)}`);
        if (view.status === "ingested" || view.status === "failed") {
          set(statusText(view), 4, view.status);
          break;
        }
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
      li.dataset.done = "true"; // its list row takes over (with its status) once the list has it
      bar.remove();
      refresh();
    } catch (err) {
      li.dataset.done = "true";
      set(errorSentence(err), 0, "failed");
      bar.remove();
    }
  }

  function take(files) {
    if (!dialog.open) dialog.showModal();
    for (const f of files) upload(f);
  }

  input.addEventListener("change", () => { take([...input.files]); input.value = ""; });
  for (const target of [zone, ...dropTargets]) {
    target.addEventListener("dragover", (e) => { if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) { e.preventDefault(); zone.classList.add("over"); } });
    target.addEventListener("dragleave", () => zone.classList.remove("over"));
    target.addEventListener("drop", (e) => {
      if (!e.dataTransfer || !e.dataTransfer.files.length) return;
      e.preventDefault();
      zone.classList.remove("over");
      take([...e.dataTransfer.files]);
    });
  }
  dialog.querySelector(".docs-close").addEventListener("click", () => dialog.close());
  return { open() { uploads.replaceChildren(); dialog.showModal(); refresh(); }, refresh };
}
