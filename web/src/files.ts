// The bytes of a file a message shows, as an object URL: one's own files through the
// page's server, another member's (in a shared conversation) through the api, which
// checks that a message of the caller's copy names it. Each is fetched once a page.
import { isShared } from "./conversation";
import { session } from "./session";
import { state } from "./store";

// storage path (or conversation:path, through the api) → its object URL, once fetched.
const urls = new Map<string, Promise<string | null>>();

export function loadFile(path: string): Promise<string | null> {
  const { config, api, auth } = session();
  const { conversationId, user } = state();
  const viaApi = conversationId !== null && isShared(conversationId) && !path.startsWith(`${user?.uid}/`);
  const filesUrl = config.filesUrl;
  if (!viaApi && !filesUrl) return Promise.resolve(null);
  const key = viaApi ? `${conversationId}:${path}` : path;
  const known = urls.get(key);
  if (known) return known;
  const fetched = viaApi
    ? api.sharedFile(conversationId, path)
    : (auth.currentUser ? auth.currentUser.getIdToken() : Promise.reject(new Error("Signed out.")))
        .then((token) => fetch(filesUrl + path.split("/").map(encodeURIComponent).join("/"), { headers: { Authorization: `Bearer ${token}` } }));
  const url = fetched
    .then((r) => (r.ok ? r.blob() : null))
    .then((blob) => (blob ? URL.createObjectURL(blob) : null))
    .catch(() => null);
  urls.set(key, url);
  return url;
}
