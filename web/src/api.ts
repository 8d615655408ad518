// The api, called only to act: send, stop, answer, approve, upload, client tool results,
// the family's actions (create, invite, join, remove, leave, settings), a person's data
// exported (their own, or a dependent's for a parent), a dependent's controls, cancelling a
// task, and a lesson's versions and restoring one. Nothing it
// answers is rendered as the truth; the page shows what Firestore says. Each call names
// its route as schemas/openapi.json does, and its body and answer are that route's
// (generated into web/generated/openapi.d.ts): a route or field the api lacks fails tsc.
import type { paths } from "../generated/openapi";
import type { Schemas } from "./types";

type Method = "get" | "post" | "put" | "patch" | "delete";
type Route = keyof paths;
type Operation<R extends Route, M extends Method> = NonNullable<paths[R][M]>;
type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
type Ok = 200 | 201 | 202;
/** The JSON body a route takes (undefined: none). */
type BodyOf<R extends Route, M extends Method> =
  Operation<R, M> extends { requestBody: { content: { "application/json": infer B } } } ? B : undefined;
/** The JSON a route answers with when it succeeds. */
type AnswerOf<R extends Route, M extends Method> =
  Operation<R, M> extends { responses: infer A } ? { [S in keyof A & Ok]: Json<A[S]> }[keyof A & Ok] : never;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Seconds until a refused request may be made again (429), when the api says. */
    readonly retryAfter: number | null = null,
    /** Why, where the api says more than its code (403 `parent_controls`: "consent",
     * "quiet_hours" or "daily_limit"). */
    readonly reason: string | null = null,
  ) {
    super(message);
  }
}

/** A dependent's controls (DESIGN §16), as `PUT .../members/{userId}/controls` takes
 * them. The route is newer than some apis this page may meet, so its body is typed here
 * and its answer read defensively (views/safety.ts). */
export interface ParentControls {
  consent: { chat: boolean; speech: boolean; transcription: boolean; moderation: boolean };
  quietHours?: { start: string; end: string; timeZone: string };
  dailyTurns?: number;
}

/** `route` with its `{name}` placeholders filled in from `params` (each encoded). */
function url(route: Route, params: Record<string, string>): string {
  return route.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? ""));
}

export function makeApi(getToken: () => Promise<string>) {
  async function call<R extends Route, M extends Method>(
    method: M,
    route: R,
    params: Record<string, string>,
    body: BodyOf<R, M>,
    extra: Record<string, string> = {},
  ): Promise<AnswerOf<R, M>> {
    const token = await getToken();
    const response = await fetch(url(route, params), {
      method: method.toUpperCase(),
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", ...extra },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    const data: unknown = text ? JSON.parse(text) : {};
    if (!response.ok) throw errorOf(response, data);
    return data as AnswerOf<R, M>;
  }
  const conversation = (conversationId: string) => ({ conversationId });
  return {
    send: (body: Schemas["SendMessageRequest"]) => call("post", "/api/spark/agent/messages", {}, body),
    // Which model answers; the demo model's examples, to offer in an empty conversation.
    model: () => call("get", "/api/spark/agent/model", {}, undefined),
    // A message to family members: `key` (Idempotency-Key) makes a retry deliver once.
    deliver: (body: Schemas["SendMessageRequest"], key: string) =>
      call("post", "/api/spark/agent/messages", {}, body, { "Idempotency-Key": key }),
    stop: (id: string) => call("post", "/api/spark/agent/conversations/{conversationId}/stop", conversation(id), undefined),
    answer: (id: string, toolCallId: string, answers: Schemas["AnswersRequest"]["answers"]) =>
      call("post", "/api/spark/agent/conversations/{conversationId}/answers", conversation(id), { toolCallId, answers }),
    approve: (id: string, toolCallId: string, approved: boolean) =>
      call("post", "/api/spark/agent/conversations/{conversationId}/approvals", conversation(id), { toolCallId, approved }),
    toolResult: (id: string, body: Schemas["ToolResultRequest"]) =>
      call("post", "/api/spark/agent/conversations/{conversationId}/tool-results", conversation(id), body),
    // Any type the browser names is sent: the api says which it takes when it refuses one.
    upload: (file: File) => {
      const contentType = file.type as Schemas["UploadRequest"]["contentType"];
      return call("post", "/api/spark/agent/uploads", {}, { fileName: file.name, contentType, sizeBytes: file.size });
    },
    // The bytes of a file a message of a shared conversation carries (another member's).
    sharedFile: async (id: string, path: string) => {
      const token = await getToken();
      const route = url("/api/spark/agent/conversations/{conversationId}/files", conversation(id));
      return fetch(`${route}?path=${encodeURIComponent(path)}`, { headers: { Authorization: `Bearer ${token}` } });
    },
    createFamily: (name: string, displayName: string) =>
      call("post", "/api/spark/families", {}, { name, ...(displayName ? { displayName } : {}) }),
    invite: (familyId: string, role: Schemas["InviteRequest"]["role"]) =>
      call("post", "/api/spark/families/{familyId}/invites", { familyId }, { role }),
    join: (token: string, displayName: string) =>
      call("post", "/api/spark/families/join", {}, { token, ...(displayName ? { displayName } : {}) }),
    removeMember: (familyId: string, userId: string) =>
      call("delete", "/api/spark/families/{familyId}/members/{userId}", { familyId, userId }, undefined),
    settings: (aiReadsFamilyMessages: boolean) =>
      call("patch", "/api/spark/me/settings", {}, { aiReadsFamilyMessages }),
    // The family panel's parents: a member's role, the invites, and revoking one.
    setRole: (familyId: string, userId: string, role: Schemas["RoleRequest"]["role"]) =>
      call("patch", "/api/spark/families/{familyId}/members/{userId}", { familyId, userId }, { role }),
    invites: (familyId: string) => call("get", "/api/spark/families/{familyId}/invites", { familyId }, undefined),
    revokeInvite: (familyId: string, inviteId: string) =>
      call("delete", "/api/spark/families/{familyId}/invites/{inviteId}", { familyId, inviteId }, undefined),
    // The name the family sees, one's own only.
    rename: (familyId: string, userId: string, displayName: string) =>
      call("put", "/api/spark/families/{familyId}/members/{userId}/name", { familyId, userId }, { displayName }),
    // A person's data as a zip (DESIGN §15): the caller's own, or with `familyId` and
    // `userId` a dependent's, for a parent. The server streams it; the page saves it.
    exportData: async (member?: { familyId: string; userId: string }): Promise<Blob> => {
      const token = await getToken();
      const route = member
        ? url("/api/spark/families/{familyId}/members/{userId}/export", member)
        : url("/api/spark/me/export", {});
      const response = await fetch(route, { headers: { Authorization: `Bearer ${token}` } });
      if (!response.ok) throw await refusal(response);
      return response.blob();
    },
    // A voice message: the answer is the SSE stream (voice.ts reads its transcript events).
    sendStreaming: async (body: Schemas["SendMessageRequest"], signal?: AbortSignal): Promise<Response> => {
      const token = await getToken();
      const response = await fetch("/api/spark/agent/messages", {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body),
        signal,
      });
      if (!response.ok) throw await refusal(response);
      return response;
    },
    // A reply of Spark AI Agent's read aloud: its audio (MP3 from a provider, WAV offline).
    speech: async (id: string, messageId: string): Promise<Blob> => {
      const token = await getToken();
      const body: Schemas["SpeechRequest"] = { messageId };
      const response = await fetch(url("/api/spark/agent/conversations/{conversationId}/speech", conversation(id)), {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw await refusal(response);
      return response.blob();
    },
    // A task of the caller's: cancelled at once, or at its running tool's next step.
    cancelTask: (taskId: string) => call("post", "/api/spark/agent/tasks/{taskId}/cancel", { taskId }, undefined),
    // A lesson's kept earlier versions, newest first, and bringing one back.
    lessonVersions: (lessonId: string) => call("get", "/api/spark/lessons/{lessonId}/versions", { lessonId }, undefined),
    restoreLesson: (lessonId: string, version: number) =>
      call("post", "/api/spark/lessons/{lessonId}/restore", { lessonId }, { version }),
    // Managing one's conversations (DESIGN §15): a title of one's own, a conversation
    // deleted (a shared one: one's own copy), a reply rated.
    renameConversation: (id: string, title: string) =>
      call("patch", "/api/spark/agent/conversations/{conversationId}", conversation(id), { title }),
    deleteConversation: (id: string) =>
      call("delete", "/api/spark/agent/conversations/{conversationId}", conversation(id), undefined),
    rate: (id: string, messageId: string, rating: Schemas["FeedbackRequest"]["rating"]) =>
      call("put", "/api/spark/agent/conversations/{conversationId}/messages/{messageId}/feedback", { conversationId: id, messageId }, { rating }),
    // The last reply made again: 202, and a Cloud Task writes the new reply (appended,
    // `regenerates` naming this one), as a send without a stream. The route is newer than
    // some apis this page may meet, so it is called by its path, its body typed.
    regenerate: async (id: string, messageId: string): Promise<void> => {
      const token = await getToken();
      const body: Schemas["RegenerateRequest"] = { messageId };
      const response = await fetch(`${url("/api/spark/agent/conversations/{conversationId}", conversation(id))}/regenerate`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw await refusal(response);
      // A stream, should the api answer with one: the reply is read from Firestore.
      await response.body?.cancel();
    },
    // A dependent's controls, set by a parent: 200 `{controls}`, the controls as kept.
    setControls: async (familyId: string, userId: string, body: ParentControls): Promise<unknown> => {
      const token = await getToken();
      const response = await fetch(`${url("/api/spark/families/{familyId}/members/{userId}", { familyId, userId })}/controls`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!response.ok) throw await refusal(response);
      return response.json().catch(() => ({}));
    },
    // An account erased (one's own, or with `familyId` and `userId` a dependent's, for a
    // parent): 202 and the erasure's id; the work goes on as a task.
    eraseAccount: (member?: { familyId: string; userId: string }) => {
      const confirm: Schemas["EraseAccountRequest"]["confirm"] = "delete my account";
      return member
        ? call("delete", "/api/spark/families/{familyId}/members/{userId}/account", member, { confirm })
        : call("delete", "/api/spark/me", {}, { confirm });
    },
  };
}

export type Api = ReturnType<typeof makeApi>;

/** The api's error answer as an ApiError. */
async function refusal(response: Response): Promise<ApiError> {
  return errorOf(response, await response.json().catch(() => ({})));
}

/** `response`'s error, from its JSON body `data` (and its Retry-After header). */
function errorOf(response: Response, data: unknown): ApiError {
  const error = (data as Partial<Schemas["ErrorBody"]>).error;
  const header = Number(response.headers.get("Retry-After"));
  const retry = error?.retryAfter ?? (Number.isFinite(header) && header > 0 ? header : null);
  return new ApiError(response.status, error?.code || "error", error?.message || `HTTP ${response.status}`, retry, reasonOf(error));
}

/** The refusal's `reason`: the error's own field, or one in an object under `details`
 * (read either way: the field is newer than the generated ErrorDetail). */
function reasonOf(error: unknown): string | null {
  const found = (from: unknown): unknown =>
    from && typeof from === "object" && "reason" in from ? (from as { reason: unknown }).reason : undefined;
  const direct = found(error);
  const nested = error && typeof error === "object" && "details" in error ? found((error as { details: unknown }).details) : undefined;
  const reason = direct ?? nested;
  return typeof reason === "string" ? reason : null;
}
