// The api, called only to act: send, stop, answer, approve, upload, client tool results,
// and the family's actions (create, invite, join, remove, leave, settings). Nothing it
// answers is rendered as the truth; the page shows what Firestore says.
const BASE = "/api/spark";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function makeApi(getToken) {
  async function call(method, path, body, extra = {}) {
    const token = await getToken();
    const response = await fetch(BASE + path, {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", ...extra },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    const data = text ? JSON.parse(text) : {};
    if (!response.ok) {
      const error = data.error || {};
      throw new ApiError(response.status, error.code || "error", error.message || `HTTP ${response.status}`);
    }
    return data;
  }
  const conversation = (id, what) => `/agent/conversations/${encodeURIComponent(id)}/${what}`;
  const family = (id, ...rest) => ["/families", encodeURIComponent(id), ...rest.map(encodeURIComponent)].join("/");
  return {
    send: (body) => call("POST", "/agent/messages", body),
    // Which model answers; the demo model's examples, to offer in an empty conversation.
    model: () => call("GET", "/agent/model"),
    // A message to family members: `key` (Idempotency-Key) makes a retry deliver once.
    deliver: (body, key) => call("POST", "/agent/messages", body, { "Idempotency-Key": key }),
    stop: (id) => call("POST", conversation(id, "stop")),
    answer: (id, toolCallId, answers) => call("POST", conversation(id, "answers"), { toolCallId, answers }),
    approve: (id, toolCallId, approved) => call("POST", conversation(id, "approvals"), { toolCallId, approved }),
    toolResult: (id, toolCallId, output, status) =>
      call("POST", conversation(id, "tool-results"), { toolCallId, output, status }),
    upload: (file) =>
      call("POST", "/agent/uploads", { fileName: file.name, contentType: file.type, sizeBytes: file.size }),
    // The bytes of a file a message of a shared conversation carries (another member's).
    sharedFile: async (id, path) => {
      const token = await getToken();
      const url = `${BASE}${conversation(id, "files")}?path=${encodeURIComponent(path)}`;
      return fetch(url, { headers: { Authorization: `Bearer ${token}` } });
    },
    createFamily: (name, displayName) => call("POST", "/families", { name, ...(displayName ? { displayName } : {}) }),
    invite: (familyId, role) => call("POST", family(familyId, "invites"), { role }),
    join: (token, displayName) => call("POST", "/families/join", { token, ...(displayName ? { displayName } : {}) }),
    removeMember: (familyId, userId) => call("DELETE", family(familyId, "members", userId)),
    settings: (aiReadsFamilyMessages) => call("PATCH", "/me/settings", { aiReadsFamilyMessages }),
  };
}
