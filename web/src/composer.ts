// The composer: a message to the agent (queued behind a reply in progress) or to family
// members (delivered as it is, once, whatever the retries), with the files attached to
// it, and the demo model's examples, each sent as if typed.
import { say } from "./actions";
import { shared } from "./conversation";
import { $, button, el } from "./dom";
import { session } from "./session";
import { addAttachment, removeAttachment, state, update } from "./store";
import type { Schemas } from "./types";
import { controlsRefusal } from "./views/safety";

// The Idempotency-Key of a message to members, and the body it was made for, until it
// is sent.
const delivery = { fingerprint: "", key: "" };
// The attachments the list was last built from (a new array each change: store.ts).
const shownAttachments = { list: null as readonly unknown[] | null };

export async function send(event: Event): Promise<void> {
  event.preventDefault();
  const box = $<HTMLTextAreaElement>("composer-text");
  const text = box.value.trim();
  const { attachments, conversationId, target } = state();
  if (!text && !attachments.length) return;
  // To family members the text is delivered as it is; to the agent it waits its turn.
  const body: Schemas["SendMessageRequest"] = shared() ? { text } : { text, whenBusy: "queue" };
  if (conversationId) body.conversationId = conversationId;
  else if (target) Object.assign(body, target);
  if (attachments.length) {
    body.attachments = attachments.map(({ storagePath, contentType, sizeBytes }) => ({ storagePath, contentType, sizeBytes }));
  }
  const { api } = session();
  $<HTMLButtonElement>("send").disabled = true;
  try {
    const sent = shared() ? await api.deliver(body, deliveryKey(body)) : await api.send(body);
    delivery.fingerprint = "";
    box.value = "";
    update({ attachments: [] });
    say("");
    if (!state().conversationId) location.hash = `#/c/${sent.conversationId}`;
  } catch (error) {
    // The text stays in the box: nothing the user wrote is lost. A dependent whose
    // parent's controls refuse it is told why, kindly.
    say(controlsRefusal(error) ?? (error as Error).message);
  } finally {
    $<HTMLButtonElement>("send").disabled = false;
  }
}

// The same message sent again after a failure (a lost answer) keeps its
// Idempotency-Key, so the members get it once; a different message gets a new one.
function deliveryKey(body: Schemas["SendMessageRequest"]): string {
  const fingerprint = JSON.stringify(body);
  if (delivery.fingerprint !== fingerprint) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    delivery.key = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    delivery.fingerprint = fingerprint;
  }
  return delivery.key;
}

/** Uploads the chosen files; each is attached to the next message once it is stored. */
export async function attach(event: Event): Promise<void> {
  const input = event.target as HTMLInputElement;
  const { api, config } = session();
  for (const file of [...(input.files || [])]) {
    say(`Uploading ${file.name}…`);
    try {
      const upload = await api.upload(file);
      let url = upload.uploadUrl;
      // Locally the session points at the Storage emulator, which answers no CORS:
      // the page's own server forwards it (tools/web.py).
      if (config.uploadsVia && url.startsWith(config.uploadsVia)) url = url.slice(config.uploadsVia.length);
      const put = await fetch(url, { method: upload.method, headers: upload.headers, body: file });
      if (!put.ok) throw new Error(`The upload of ${file.name} failed (${put.status}).`);
      addAttachment({ storagePath: upload.storagePath, contentType: file.type, sizeBytes: file.size, name: file.name });
      say(`${file.name} is attached.`);
    } catch (error) {
      say((error as Error).message);
    }
  }
  input.value = "";
}

/** The files attached to the next message, each with its Remove button. */
export function renderAttached(): void {
  const list = $("attached");
  const { attachments } = state();
  if (shownAttachments.list === attachments) return;
  shownAttachments.list = attachments;
  list.replaceChildren(
    ...attachments.map((a, index) => el("li", {}, `${a.name} `, button(`Remove ${a.name}`, () => removeAttachment(index)))),
  );
}

/** An empty conversation with the agent, when the demo model answers: its examples as
 * buttons, each sent as if typed. */
export function renderExamples(): void {
  const { model, conversationId } = state();
  const examples = (model && model.demo && model.examples) || [];
  const offer = examples.length > 0 && !conversationId && !shared();
  $("examples").hidden = !offer;
  if (!offer || $("example-list").children.length) return;
  $("example-list").replaceChildren(
    ...examples.map((example) =>
      el(
        "li",
        {},
        button(example, () => {
          $<HTMLTextAreaElement>("composer-text").value = example;
          $<HTMLFormElement>("composer").requestSubmit();
        }),
      ),
    ),
  );
}

// Which model answers (the demo model offers what it recognises); asked once a sign-in.
export async function loadModel(): Promise<void> {
  update({ model: null });
  try {
    update({ model: await session().api.model() });
  } catch {
    // nothing to offer: the conversation works the same
  }
}
