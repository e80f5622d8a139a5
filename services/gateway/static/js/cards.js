// Evidence cards: hovering, focusing or tapping a citation chip opens the passage it points at.
import { t } from "./i18n.js";

const KINDS = { original: "kind.original", summary: "kind.summary", web: "kind.web", history: "kind.history" };

/** Runs [start, end) of `passage` whose character bigrams occur in any of `needles` (the matched part). */
export function matchedRuns(passage, needles) {
  const grams = new Set();
  for (const needle of needles) {
    const clean = (needle || "").replace(/\[\d+\]|[\s，。、；：！？,.;:!?（）()《》“”"'*#`]/g, "");
    for (let i = 0; i + 1 < clean.length; i += 1) grams.add(clean.slice(i, i + 2));
  }
  const runs = [];
  let start = -1;
  for (let i = 0; i + 1 <= passage.length; i += 1) {
    const hit = i + 1 < passage.length && grams.has(passage.slice(i, i + 2));
    if (hit && start < 0) start = i;
    if (!hit && start >= 0) {
      if (i + 1 - start >= 4) runs.push([start, i + 1]); // a run of >= 3 bigrams: 4+ characters
      start = -1;
    }
  }
  return runs;
}

function markedPassage(text, needles) {
  const p = document.createElement("p");
  p.className = "card-passage";
  let last = 0;
  for (const [a, b] of matchedRuns(text, needles)) {
    p.append(text.slice(last, a));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(a, b);
    p.append(mark);
    last = b;
  }
  p.append(text.slice(last));
  return p;
}

/** A kind badge element (原文 / 摘要 / 网页). */
export function kindBadge(kind) {
  const b = document.createElement("span");
  b.className = `badge badge-${kind || "original"}`;
  b.textContent = t(KINDS[kind] || KINDS.original);
  return b;
}

/** The card body for evidence `item` ({index, kind, title, locator, url, text, refs}); `needles` are highlighted. */
export function cardContent(item, needles = []) {
  const box = document.createElement("div");
  box.className = "card-inner";
  const head = document.createElement("div");
  head.className = "card-head";
  const num = document.createElement("span");
  num.className = "card-num";
  num.textContent = `[${item.index}]`;
  const title = document.createElement("span");
  title.className = "card-title";
  title.textContent = item.title;
  head.append(num, kindBadge(item.kind), title);
  box.append(head);
  if (item.locator) {
    const loc = document.createElement("div");
    loc.className = "card-locator";
    const name = item.title.startsWith("《") ? item.title.replace(/\.(txt|md|pdf|html)》$/, "》") : `《${item.title}》`;
    loc.textContent = `${name}${item.locator}`;
    box.append(loc);
  }
  if (item.text) box.append(markedPassage(item.text, needles));
  if (item.refs && item.refs.length) {  // the articles this passage cites (rule K16), which kb_follow can fetch
    const refs = document.createElement("div");
    refs.className = "card-refs";
    refs.textContent = `${t("card.refs")}：${item.refs.map((r) => r.label).join("、")}`;
    box.append(refs);
  }
  if (item.url) {
    const a = document.createElement("a");
    a.href = /^https?:/i.test(item.url) ? item.url : "#";
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    a.className = "card-link";
    a.textContent = `${t("card.open")} ↗ ${item.url}`;
    box.append(a);
  }
  return box;
}

/**
 * One floating card for the whole page. `lookup(chip)` returns {item, needles} or null.
 * Hover/focus opens, leaving closes after a moment unless the pointer is over the card;
 * a click or tap pins it open; Escape or a click elsewhere closes it.
 */
export function installCards(root, lookup) {
  const card = document.createElement("div");
  card.className = "card";
  card.setAttribute("role", "dialog");
  card.hidden = true;
  document.body.append(card);
  let owner = null;
  let pinned = false;
  let timer = null;

  function open(chip) {
    const found = lookup(chip);
    if (!found) return;
    clearTimeout(timer);
    owner = chip;
    card.replaceChildren(cardContent(found.item, found.needles));
    card.setAttribute("aria-label", `[${found.item.index}] ${found.item.title}`);
    card.dataset.index = String(found.item.index);
    card.hidden = false;
    chip.setAttribute("aria-expanded", "true");
    place(chip);
  }
  function close() {
    clearTimeout(timer);
    if (owner) owner.setAttribute("aria-expanded", "false");
    card.hidden = true;
    owner = null;
    pinned = false;
  }
  function place(chip) {
    const r = chip.getBoundingClientRect();
    const w = Math.min(420, window.innerWidth - 16);
    card.style.width = `${w}px`;
    const left = Math.max(8, Math.min(r.left + window.scrollX - 24, window.scrollX + window.innerWidth - w - 8));
    card.style.left = `${left}px`;
    const below = r.bottom + 8;
    const height = card.offsetHeight;
    const top = below + height > window.innerHeight && r.top - height - 8 > 0 ? r.top - height - 8 : below;
    card.style.top = `${top + window.scrollY}px`;
  }
  const chipOf = (el) => (el instanceof Element ? el.closest("[data-cite]") : null);
  root.addEventListener("mouseover", (e) => { const c = chipOf(e.target); if (c && !pinned) open(c); });
  root.addEventListener("mouseout", (e) => {
    const c = chipOf(e.target);
    if (c && !pinned) timer = setTimeout(close, 250);
  });
  root.addEventListener("focusin", (e) => { const c = chipOf(e.target); if (c && !pinned) open(c); });
  root.addEventListener("click", (e) => {
    const c = chipOf(e.target);
    if (!c) return;
    e.preventDefault();
    if (pinned && owner === c) { close(); return; }
    open(c);
    pinned = true;
  });
  card.addEventListener("mouseenter", () => clearTimeout(timer));
  card.addEventListener("mouseleave", () => { if (!pinned) timer = setTimeout(close, 250); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && !card.hidden) { const o = owner; close(); if (o) o.focus(); } });
  document.addEventListener("click", (e) => { if (!card.hidden && !card.contains(e.target) && !chipOf(e.target)) close(); });
  window.addEventListener("resize", () => { if (owner) place(owner); });
  return { close };
}
