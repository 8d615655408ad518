// The api, called only to act: send, stop, answer, approve, upload, client tool results.
// Nothing it answers is rendered; the conversation shows what Firestore says.
const BASE = "/api/spark/agent";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function makeApi(getToken) {
  async function call(method, path, body) {
    const token = await getToken();
    const response = await fetch(BASE + path, {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
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
  const conversation = (id, what) => `/conversations/${encodeURIComponent(id)}/${what}`;
  return {
    send: (body) => call("POST", "/messages", body),
    stop: (id) => call("POST", conversation(id, "stop")),
    answer: (id, toolCallId, answers) => call("POST", conversation(id, "answers"), { toolCallId, answers }),
    approve: (id, toolCallId, approved) => call("POST", conversation(id, "approvals"), { toolCallId, approved }),
    toolResult: (id, toolCallId, output, status) =>
      call("POST", conversation(id, "tool-results"), { toolCallId, output, status }),
    upload: (file) =>
      call("POST", "/uploads", { fileName: file.name, contentType: file.type, sizeBytes: file.size }),
  };
}
