// The session list of this browser, per tenant and user (localStorage): id, title, its tasks.
const MAX_SESSIONS = 100;

function storeKey(who) {
  return `conduit.sessions.${(who && who.tenant_id) || "default"}.${(who && who.user_id) || "local"}`;
}

/** Sessions of `who` ({tenant_id, user_id}), newest first: [{id, title, tasks: [{task_id, question}], updated}]. */
export function listSessions(who) {
  try {
    const all = JSON.parse(localStorage.getItem(storeKey(who)) || "[]");
    return Array.isArray(all) ? all.sort((a, b) => b.updated - a.updated) : [];
  } catch {
    return [];
  }
}

function save(who, sessions) {
  localStorage.setItem(storeKey(who), JSON.stringify(sessions.slice(0, MAX_SESSIONS)));
}

/** Record that task `taskId` (question `question`) belongs to session `id`; creates the session if new. */
export function addTask(who, id, taskId, question) {
  const sessions = listSessions(who);
  let s = sessions.find((x) => x.id === id);
  if (!s) {
    s = { id, title: question.slice(0, 40), tasks: [], updated: 0 };
    sessions.unshift(s);
  }
  if (!s.tasks.some((x) => x.task_id === taskId)) s.tasks.push({ task_id: taskId, question });
  s.updated = Date.now();
  save(who, sessions);
  return s;
}

/** Rename session `id`. */
export function renameSession(who, id, title) {
  const sessions = listSessions(who);
  const s = sessions.find((x) => x.id === id);
  if (s && title.trim()) { s.title = title.trim().slice(0, 80); save(who, sessions); }
}

/** Remove session `id` from the list. */
export function deleteSession(who, id) {
  save(who, listSessions(who).filter((x) => x.id !== id));
}

/** The session `id` or undefined. */
export function getSession(who, id) {
  return listSessions(who).find((x) => x.id === id);
}
