// Answer text -> sanitised HTML: Markdown (marked), each [n] a citation chip, DOMPurify last.
import { Marked } from "../vendor/marked.esm.js";
import DOMPurify from "../vendor/purify.es.js";

const citation = {
  name: "citation",
  level: "inline",
  start(src) { const m = src.match(/\[\d{1,3}(?:\s*[,，]\s*\d{1,3})*\](?!\()/); return m ? m.index : undefined; },
  tokenizer(src) {
    const m = /^\[(\d{1,3}(?:\s*[,，]\s*\d{1,3})*)\](?!\()/.exec(src);
    if (!m) return undefined;
    return { type: "citation", raw: m[0], numbers: m[1].split(/\s*[,，]\s*/).map(Number) };
  },
  renderer(token) {
    return token.numbers.map((n) => `<button type="button" class="chip" data-cite="${n}" aria-label="[${n}]">${n}</button>`).join("");
  },
};

const marked = new Marked({ gfm: true, breaks: true, async: false });
marked.use({ extensions: [citation] });

const PURIFY = {
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#|\/)/i,
  FORBID_TAGS: ["style", "form", "input", "textarea", "select", "iframe", "img"],
  FORBID_ATTR: ["style"],
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/** Sanitised HTML of Markdown `text`; `[n]` becomes `<button class="chip" data-cite="n">`. */
export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
}

/** The numbers cited as [n] in `text`, in order of first appearance. */
export function citedNumbers(text) {
  const seen = [];
  for (const m of (text || "").matchAll(/\[(\d{1,3}(?:\s*[,，]\s*\d{1,3})*)\](?!\()/g)) {
    for (const n of m[1].split(/\s*[,，]\s*/).map(Number)) if (!seen.includes(n)) seen.push(n);
  }
  return seen;
}

/** The sentence of `text` around the first `[n]` (the words the citation supports). */
export function citingSentence(text, n) {
  const at = (text || "").search(new RegExp(`\\[(?:\\d{1,3}\\s*[,，]\\s*)*${n}(?:\\s*[,，]\\s*\\d{1,3})*\\]`));
  if (at < 0) return "";
  const before = text.slice(0, at);
  const start = Math.max(before.lastIndexOf("。"), before.lastIndexOf("\n"), before.lastIndexOf("！"), before.lastIndexOf("？"), before.lastIndexOf(". ")) + 1;
  return before.slice(start);
}

const PY_KEYWORDS = new Set(("False None True and as assert async await break class continue def del elif else except finally for from " +
  "global if import in is lambda nonlocal not or pass raise return try while with yield print range len").split(" "));

/** A DOM fragment of Python `code` with spans for keywords, strings, comments and numbers (no HTML parsing). */
export function highlightPython(code) {
  const frag = document.createDocumentFragment();
  const re = /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(\b\d+(?:\.\d+)?\b)|([A-Za-z_]\w*)/g;
  let last = 0;
  for (const m of code.matchAll(re)) {
    if (m.index > last) frag.append(code.slice(last, m.index));
    const cls = m[1] ? "tok-comment" : m[2] ? "tok-string" : m[3] ? "tok-number" : PY_KEYWORDS.has(m[4]) ? "tok-keyword" : null;
    if (cls) {
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = m[0];
      frag.append(span);
    } else {
      frag.append(m[0]);
    }
    last = m.index + m[0].length;
  }
  frag.append(code.slice(last));
  return frag;
}
