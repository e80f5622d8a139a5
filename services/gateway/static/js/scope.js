// The question's scope: a small picker above the question box that limits the next questions' knowledge-base
// searches to some collections (the law corpus, all my documents, a named collection) and/or documents
// (POST /v1/tasks `collections` / `document_ids`; rules Q1-Q4, docs/rules.md; docs/page.md).
import { t } from "./i18n.js";
import { request, errorSentence } from "./api.js";

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/** Wire the picker in `root` (#scope: a toggle button and its panel). Returns
 *  `{ body() -> {collections?, document_ids?}, refresh(), close(), reset(), render() }`. */
export function installScope(root) {
  const toggle = root.querySelector(".scope-toggle");
  const summary = root.querySelector(".scope-summary");
  const panel = root.querySelector(".scope-panel");
  const lists = { collections: panel.querySelector(".scope-collections"), documents: panel.querySelector(".scope-documents") };
  const chosen = new Map(); // "collection:<name>" | "document:<id>" -> the label shown
  let generation = 0;

  function render() {
    summary.textContent = chosen.size ? [...chosen.values()].join("、") : t("scope.all");
    toggle.title = chosen.size ? t("scope.only", { what: [...chosen.values()].join("、") }) : t("scope.hint");
    root.classList.toggle("scope-on", chosen.size > 0);
  }

  function option(key, label, detail) {
    const li = el("li", "scope-option");
    const input = el("input");
    input.type = "checkbox";
    input.value = key;
    input.dataset.label = label;
    input.checked = chosen.has(key);
    input.addEventListener("change", () => {
      if (input.checked) chosen.set(key, label); else chosen.delete(key);
      render();
    });
    const text = el("label");
    text.append(input, el("span", "scope-name", label));
    if (detail) text.append(el("span", "scope-detail", detail));
    li.append(text);
    return li;
  }

  // The options: the two built-in collections, the named ones the documents were posted in, then the
  // documents that are searchable (ingested). A chosen document or collection that is gone is dropped.
  async function refresh() {
    const mine = ++generation;
    let documents = [];
    try {
      documents = (await request("/v1/documents")).documents.filter((d) => d.status === "ingested");
    } catch (err) {
      if (mine === generation) lists.documents.replaceChildren(el("li", "docs-error", errorSentence(err)));
      return;
    }
    if (mine !== generation) return;
    const named = [...new Set(documents.map((d) => d.collection).filter(Boolean))].sort();
    const options = [
      option("collection:law", t("scope.law"), t("scope.law_detail")),
      option("collection:documents", t("scope.documents"), t("scope.documents_detail")),
      ...named.map((name) => option(`collection:${name}`, name, t("scope.collection_detail"))),
    ];
    lists.collections.replaceChildren(...options);
    lists.documents.replaceChildren(...documents.map((d) => option(`document:${d.document_id}`, d.title,
      d.collection ? `${d.collection}` : "")));
    if (!documents.length) lists.documents.append(el("li", "docs-empty", t("docs.empty")));
    const present = new Map([...panel.querySelectorAll("input[type=checkbox]")].map((i) => [i.value, i.dataset.label]));
    for (const key of [...chosen.keys()]) {
      if (present.has(key)) chosen.set(key, present.get(key)); else chosen.delete(key); // relabelled, or gone
    }
    render();
  }

  function open() {
    panel.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    refresh().then(() => { const first = panel.querySelector("input"); if (first && !panel.hidden) first.focus(); });
  }

  function close(focus = false) {
    if (panel.hidden) return;
    panel.hidden = true;
    toggle.setAttribute("aria-expanded", "false");
    if (focus) toggle.focus();
  }

  toggle.addEventListener("click", () => (panel.hidden ? open() : close()));
  panel.querySelector(".scope-clear").addEventListener("click", () => {
    chosen.clear();
    for (const i of panel.querySelectorAll("input[type=checkbox]")) i.checked = false;
    render();
  });
  panel.querySelector(".scope-done").addEventListener("click", () => close(true));
  root.addEventListener("keydown", (e) => { if (e.key === "Escape" && !panel.hidden) { e.stopPropagation(); close(true); } });
  document.addEventListener("click", (e) => { if (!root.contains(e.target)) close(); });
  render();

  return {
    /** The scope fields of a POST /v1/tasks body (empty: every source the user may read). */
    body() {
      const out = {};
      const keys = [...chosen.keys()];
      const collections = keys.filter((k) => k.startsWith("collection:")).map((k) => k.slice(11));
      const documentIds = keys.filter((k) => k.startsWith("document:")).map((k) => k.slice(9));
      if (collections.length) out.collections = collections;
      if (documentIds.length) out.document_ids = documentIds;
      return out;
    },
    refresh,
    close,
    /** Forget the picks (another user signs in). */
    reset() { chosen.clear(); close(); render(); },
    /** Redraw the summary in the current language. */
    render,
  };
}
