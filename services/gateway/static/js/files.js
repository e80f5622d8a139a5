// Files the sandbox wrote (plots, CSV): fetched with the tab's key, images inline, the rest as downloads.
import { request } from "./api.js";

const BLOBS = new Map(); // artifact id -> Promise<object URL>

function blobUrl(artifact, taskId) {
  if (!BLOBS.has(artifact.id)) {
    const url = `${artifact.url}?task_id=${encodeURIComponent(taskId)}`;
    BLOBS.set(artifact.id, request(url, { raw: true }).then((r) => r.blob()).then((b) => URL.createObjectURL(b))
      .catch((err) => { BLOBS.delete(artifact.id); throw err; }));
  }
  return BLOBS.get(artifact.id);
}

/** A figure (image artifacts) or a download link for `artifact` ({id, name, media_type, bytes, url}) of task `taskId`. */
export function artifactView(artifact, taskId) {
  const name = artifact.name.split("/").pop();
  if (artifact.media_type.startsWith("image/") && artifact.media_type !== "image/svg+xml") {
    const fig = document.createElement("figure");
    fig.className = "artifact-figure";
    const img = document.createElement("img");
    img.alt = name;
    const cap = document.createElement("figcaption");
    cap.textContent = name;
    fig.append(img, cap);
    blobUrl(artifact, taskId).then((u) => { img.src = u; }).catch(() => { cap.textContent = `${name} ✕`; });
    return fig;
  }
  const a = document.createElement("a");
  a.className = "artifact-file";
  a.textContent = `⬇ ${name} (${formatBytes(artifact.bytes)})`;
  a.href = "#";
  a.addEventListener("click", async (e) => {
    e.preventDefault();
    const u = await blobUrl(artifact, taskId);
    const link = document.createElement("a");
    link.href = u;
    link.download = name;
    link.click();
  });
  return a;
}

function formatBytes(n) {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`;
}
