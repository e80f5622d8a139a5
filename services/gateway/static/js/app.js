// The page: login, sessions sidebar, composer; each answer is a Turn (turn.js).
import { t, lang, setLang, applyStatic } from "./i18n.js";
import { auth, request, verifyKey, redeemToken, errorSentence, ApiError } from "./api.js";
import { installCards } from "./cards.js";
import { Turn, turnOf } from "./turn.js";
import { installDocuments } from "./documents.js";
import { installScope } from "./scope.js";
import { Sessions } from "./sessions.js";

const $ = (id) => document.getElementById(id);
const CURRENT = "conduit.current";

const state = { sessionId: null, turns: [], active: null, sessions: null, scope: null };

function showLogin(message = "") {
  if (state.scope) state.scope.reset();
  for (const turn of state.turns) turn.detach();
  state.turns = [];
  state.active = null;
  state.sessionId = null;
  delete document.body.dataset.ready;
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("login-key").value = "";
  $("login-key").focus();
}

async function showApp() {
  $("login").hidden = true;
  $("app").hidden = false;
  const who = auth.who || {};
  $("who").textContent = who.user_id && who.user_id !== "local" ? `${who.user_id}${who.role ? ` · ${who.role}` : ""}` : "";
  state.sessions = new Sessions(who);
  try {
    await state.sessions.detect();
    await state.sessions.list();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;
    showBanner(errorSentence(err));
  }
  // the list loads asynchronously: if the user already started a question meanwhile, keep it
  if (!state.turns.length && !state.sessionId) {
    const last = sessionStorage.getItem(CURRENT);
    if (last && state.sessions.get(last)) await openSession(last); else newSession();
  } else {
    renderSessions(true);
  }
  document.body.dataset.ready = "true";
  $("question").focus();
}

async function loginWith(key) {
  $("login-error").textContent = t("login.checking");
  try {
    const who = await verifyKey(key);
    auth.set(key, who);
    showApp();
  } catch (err) {
    $("login-error").textContent = err instanceof ApiError && (err.status === 401 || err.status === 403) ? t("login.bad_key") : errorSentence(err);
  }
}

async function loginFromHash() {
  const m = /^#login=(.+)$/.exec(location.hash);
  if (!m) return false;
  history.replaceState(null, "", location.pathname + location.search); // the token is single-use: drop it from the address bar
  try {
    const got = await redeemToken(decodeURIComponent(m[1]));
    auth.set(got.api_key, { tenant_id: got.tenant_id, user_id: got.user_id, role: got.role });
    showApp();
  } catch (err) {
    showLogin(err instanceof ApiError && err.status !== 0 ? t("login.bad_link") : errorSentence(err));
  }
  return true;
}

// ------------------------------------------------------------------ sessions
/** Redraw the sidebar; with `reload`, fetch the list again first. */
async function renderSessions(reload = false) {
  if (!state.sessions) return;
  if (reload) {
    try { await state.sessions.list(); } catch (err) { if (!(err instanceof ApiError && err.status === 401)) showBanner(errorSentence(err)); }
  }
  const ul = $("sessions");
  ul.replaceChildren();
  const sessions = state.sessions.cache;
  if (!sessions.length) {
    const li = document.createElement("li");
    li.className = "sessions-empty";
    li.textContent = t("sessions.empty");
    ul.append(li);
  }
  for (const s of sessions) {
    const li = document.createElement("li");
    li.className = s.id === state.sessionId ? "session current" : "session";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "session-open";
    open.textContent = s.title;
    open.title = s.title;
    if (s.id === state.sessionId) open.setAttribute("aria-current", "true");
    open.addEventListener("click", () => { openSession(s.id); closeSidebar(); });
    const rename = iconButton("✎", t("sessions.rename"), () => {
      const title = prompt(t("sessions.rename_prompt"), s.title);
      if (title && title.trim()) {
        state.sessions.rename(s.id, title).then(() => renderSessions(true), (err) => showBanner(errorSentence(err)));
      }
    });
    const del = iconButton("×", t("sessions.delete"), () => {
      if (!confirm(t(state.sessions.server ? "sessions.delete_confirm" : "sessions.delete_confirm_local"))) return;
      state.sessions.remove(s.id).then(() => {
        if (s.id === state.sessionId) newSession(); else renderSessions(true);
      }, (err) => showBanner(errorSentence(err)));
    });
    li.append(open, rename, del);
    ul.append(li);
  }
  const current = state.sessions.get(state.sessionId);
  $("session-title").textContent = current ? current.title : t("sessions.new");
}

function iconButton(glyph, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "btn btn-ghost icon small";
  b.textContent = glyph;
  b.setAttribute("aria-label", label);
  b.title = label;
  b.addEventListener("click", onClick);
  return b;
}

function clearConversation() {
  for (const turn of state.turns) turn.detach();
  state.turns = [];
  state.active = null;
  setRunning(false);
  for (const n of [...$("conversation").querySelectorAll(".turn")]) n.remove();
}

function newSession() {
  clearConversation();
  state.sessionId = null;
  sessionStorage.removeItem(CURRENT);
  $("empty").hidden = false;
  renderSessions(true);
}

async function openSession(id) {
  let turns = null;
  try { turns = await state.sessions.turns(id); } catch (err) { showBanner(errorSentence(err)); return; }
  if (!turns) { newSession(); return; }
  clearConversation();
  state.sessionId = id;
  sessionStorage.setItem(CURRENT, id);
  $("empty").hidden = turns.length > 0;
  for (const turn of turns) startTurn(turn.question, turn.task_id, turn);
  renderSessions();
}

// ------------------------------------------------------------------ asking
function setRunning(running) {
  $("send").hidden = running;
  $("stop").hidden = !running;
}

function startTurn(question, taskId, stored = null) {
  const turn = new Turn($("conversation"), question, taskId, stored, (done) => {
    if (state.active === done) { state.active = null; setRunning(false); }
  });
  state.turns.push(turn);
  state.active = turn;
  setRunning(true);
  turn.follow();
  return turn;
}

async function ask() {
  const box = $("question");
  const question = box.value.trim();
  if (!question || state.active) return;
  box.value = "";
  autosize();
  state.scope.close();
  $("empty").hidden = true;
  const body = { question };
  if (state.sessionId) body.session_id = state.sessionId;
  if ($("team-mode").checked) body.mode = "team"; // a supervisor and parallel workers (docs/agent-rules.md D1)
  Object.assign(body, state.scope.body()); // the picked documents and collections (rules Q1-Q4, docs/rules.md)
  try {
    const created = await request("/v1/tasks", { json: body, headers: { "Idempotency-Key": randomId() } });
    state.sessionId = created.session_id;
    sessionStorage.setItem(CURRENT, created.session_id);
    state.sessions.addTask(created.session_id, created.task_id, question);
    renderSessions(true);
    showBanner("");
    startTurn(question, created.task_id).node.scrollIntoView({ block: "start", behavior: "smooth" });
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;
    box.value = question;
    showBanner(errorSentence(err));
  }
}

/** A random hex id (crypto.randomUUID needs a secure context; plain http on a LAN address is not one). */
function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function showBanner(text) {
  const b = $("banner");
  b.textContent = text;
  b.hidden = !text;
}

function autosize() {
  const box = $("question");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight, 200)}px`;
}

// ------------------------------------------------------------------ layout
let measure = null; // a canvas context measuring the placeholder in the composer's font

/** The composer's placeholder on one line: the long one (with the Enter / Shift+Enter hint) when it fits the
 *  box's width, else the short one (phone width). Runs when the box changes size and after a language switch. */
function fitPlaceholder() {
  const box = $("question");
  if (!box.clientWidth) return; // not shown yet (login): the ResizeObserver calls again when it is
  const style = getComputedStyle(box);
  measure ||= document.createElement("canvas").getContext("2d");
  measure.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 2; // px; 2 for rounding
  const long = t("composer.placeholder");
  box.placeholder = measure.measureText(long).width <= room ? long : t("composer.placeholder_short");
}

function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("scrim").hidden = true;
  $("toggle-sidebar").setAttribute("aria-expanded", "false");
}

function wire() {
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("login-key").value.trim();
    if (key) loginWith(key);
  });
  $("logout").addEventListener("click", () => { auth.clear(); sessionStorage.removeItem(CURRENT); showLogin(""); });
  for (const b of document.querySelectorAll(".lang-switch")) {
    b.addEventListener("click", () => {
      setLang(lang() === "zh" ? "en" : "zh");
      applyStatic();
      fitPlaceholder();
      state.scope.render();
      if ($("app").hidden) return;
      // the answers on screen are drawn again in the new language (not while one is streaming)
      if (state.sessionId && !state.active && state.turns.length) openSession(state.sessionId); else renderSessions();
    });
  }
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); ask(); });
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) { e.preventDefault(); ask(); }
  });
  $("question").addEventListener("input", autosize);
  new ResizeObserver(fitPlaceholder).observe($("question"));
  $("example").addEventListener("click", () => { $("question").value = $("example").textContent; ask(); });
  $("stop").addEventListener("click", () => { if (state.active) state.active.stop(); });
  $("new-session").addEventListener("click", () => { newSession(); closeSidebar(); $("question").focus(); });
  $("toggle-sidebar").addEventListener("click", () => {
    const open = !document.body.classList.contains("sidebar-open");
    document.body.classList.toggle("sidebar-open", open);
    $("scrim").hidden = !open;
    $("toggle-sidebar").setAttribute("aria-expanded", String(open));
  });
  $("scrim").addEventListener("click", closeSidebar);
  state.scope = installScope($("scope"));
  const docs = installDocuments($("docs"), [$("conversation")]);
  $("open-docs").addEventListener("click", () => { docs.open(); closeSidebar(); });
  window.addEventListener("conduit:unauthorized", () => showLogin(t("login.expired")));
  installCards($("conversation"), (chip) => {
    const turn = turnOf(chip);
    return turn ? turn.lookup(Number(chip.dataset.cite)) : null;
  });
}

async function main() {
  applyStatic();
  wire();
  if (await loginFromHash()) return;
  if (auth.key) {
    try {
      auth.set(auth.key, await verifyKey(auth.key));
      showApp();
    } catch (err) {
      showLogin(err instanceof ApiError && err.status === 401 ? t("login.expired") : errorSentence(err));
    }
    return;
  }
  showLogin("");
}

main();
