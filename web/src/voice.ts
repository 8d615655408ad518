// Voice: push-to-talk and read aloud (docs/concepts/voice.md). "Talk" is a toggle
// button (so the keyboard works it as the mouse does): pressed, it records with
// MediaRecorder; pressed again, the clip goes up through an upload session and is sent
// as `voice`, with `Accept: text/event-stream` so that its `transcript` events can be
// shown as the server hears them. The reply itself, like everything else, is shown from
// Firestore. "Read aloud" on each finished reply plays the speech route's audio in the
// page's one <audio> element.
import { say } from "./actions";
import { ApiError } from "./api";
import { shared } from "./conversation";
import { $, el } from "./dom";
import { session } from "./session";
import { controlsRefusal } from "./views/safety";
import { state } from "./store";
import type { Schemas, SseEvent } from "./types";

// The recording under way, if any, and the audio already fetched for each reply.
const recording = { recorder: null as MediaRecorder | null, chunks: [] as Blob[], sending: false, heardIn: "" };
const spoken = new Map<string, string>();

// Opus in WebM is what Chromium and Firefox record; Safari records MP4 (AAC).
const TYPES = ["audio/webm;codecs=opus", "audio/webm", "audio/ogg;codecs=opus", "audio/mp4"];

function talkButton(): HTMLButtonElement {
  return $<HTMLButtonElement>("talk");
}

function heard(text: string, done = false): void {
  const box = $("transcript");
  box.hidden = !text;
  box.textContent = text ? `${done ? "You said" : "Hearing"}: ${text}` : "";
}

/** The Talk button: starts a recording, or ends it and sends it. */
export async function talk(): Promise<void> {
  if (recording.recorder) {
    recording.recorder.stop();
    return;
  }
  if (recording.sending) return;
  if (!navigator.mediaDevices || typeof MediaRecorder === "undefined") {
    say("This browser cannot record sound.");
    return;
  }
  let stream: MediaStream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch {
    say("The microphone is not available: allow this page to use it, then try again.");
    return;
  }
  const mimeType = TYPES.find((type) => MediaRecorder.isTypeSupported(type)) || "";
  const recorder = new MediaRecorder(stream, mimeType ? { mimeType } : {});
  recording.recorder = recorder;
  recording.chunks = [];
  recorder.addEventListener("dataavailable", (event) => { if (event.data.size) recording.chunks.push(event.data); });
  recorder.addEventListener("stop", () => {
    for (const track of stream.getTracks()) track.stop();
    recording.recorder = null;
    talkButton().setAttribute("aria-pressed", "false");
    const type = recorder.mimeType || mimeType || "audio/webm";
    sendClip(new Blob(recording.chunks, { type }));
  });
  recorder.start(250);
  talkButton().setAttribute("aria-pressed", "true");
  heard("");
  say("Recording… press Talk again to send.");
}

async function sendClip(clip: Blob): Promise<void> {
  if (!clip.size) {
    say("Nothing was recorded.");
    return;
  }
  recording.sending = true;
  recording.heardIn = state().conversationId ?? "";
  talkButton().disabled = true;
  say("Sending your voice message…");
  try {
    const { api, config } = session();
    const extension = clip.type.includes("mp4") ? "m4a" : clip.type.includes("ogg") ? "ogg" : "webm";
    const upload = await api.upload(new File([clip], `voice.${extension}`, { type: clip.type }));
    let target = upload.uploadUrl;
    // As for attachments (composer.ts): locally the page's own server forwards the PUT.
    if (config.uploadsVia && target.startsWith(config.uploadsVia)) target = target.slice(config.uploadsVia.length);
    const put = await fetch(target, { method: upload.method, headers: upload.headers, body: clip });
    if (!put.ok) throw new Error(`The upload of your voice message failed (${put.status}).`);
    const body: Schemas["SendMessageRequest"] = { voice: { storagePath: upload.storagePath } };
    const { conversationId } = state();
    if (conversationId) body.conversationId = conversationId;
    await follow(await api.sendStreaming(body));
  } catch (error) {
    heard("");
    // A dependent's parent's controls: said kindly, by their reason.
    say(controlsRefusal(error) ?? (error instanceof ApiError || error instanceof Error ? error.message : String(error)));
  } finally {
    recording.sending = false;
    talkButton().disabled = false;
  }
}

/** Reads the answer's SSE stream: the transcript as it comes, then the conversation
 * it went into (opened, if it is new); the reply is Firestore's to show. */
async function follow(response: Response): Promise<void> {
  if (!response.body) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let pieces = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const type = /^event: ?(.*)$/m.exec(frame)?.[1] ?? "message";
      const data = frame.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      // The event as schemas/events.schema.json has it: the `event:` line is its type.
      const event = { ...(JSON.parse(data) as object), type } as SseEvent;
      if (event.type === "transcript") {
        pieces = event.final ? event.content : pieces + event.content;
        heard(pieces.trim(), event.final);
      } else if (event.type === "run_start") {
        say("");
        const id = event.conversationId;
        // What was heard belongs to this conversation. Said here, not when the hash
        // change is rendered: the stream may end before that render comes.
        if (id) recording.heardIn = id;
        if (id && !state().conversationId) location.hash = `#/c/${id}`;
      } else if (event.type === "error") {
        say(event.message || "Something went wrong.");
      }
    }
  }
}

/** Talk is offered in conversations with the agent only (members get text). What was
 * heard stays until another conversation is opened. */
export function renderTalk(): void {
  const hide = shared();
  talkButton().hidden = hide;
  const open = state().conversationId ?? "";
  // A new conversation is in the address before the page opens it (the hashchange is
  // handled later, and on a busy machine a render may come between): still this one.
  const opening = Boolean(recording.heardIn) && location.hash === `#/c/${recording.heardIn}`;
  if (hide || (!recording.sending && recording.heardIn !== open && !opening)) heard("");
}

/** A "Read aloud" button on each finished reply of Spark AI Agent's. The articles are
 * the message log's (views/messages.ts): one built again gets its button again. */
export function renderReadAloud(): void {
  const { conversationId } = state();
  if (!conversationId || shared()) return;
  for (const article of $("messages").querySelectorAll<HTMLElement>("article.assistant[data-status=complete]")) {
    const messageId = article.dataset.messageId;
    if (!messageId || article.querySelector(":scope > .read-aloud")) continue;
    const read = el("button", { type: "button", className: "read-aloud quiet", text: "Read aloud" });
    read.addEventListener("click", () => readAloud(conversationId, messageId));
    article.append(read);
  }
}

async function readAloud(conversationId: string, messageId: string): Promise<void> {
  const player = $<HTMLAudioElement>("player");
  try {
    let source = spoken.get(messageId);
    if (!source) {
      say("Reading aloud…");
      source = URL.createObjectURL(await session().api.speech(conversationId, messageId));
      spoken.set(messageId, source);
    }
    player.hidden = false;
    player.src = source;
    await player.play();
    say("");
  } catch (error) {
    say(controlsRefusal(error) ?? (error as Error).message);
  }
}
