// What the open conversation holds, read from the state: its messages in the order the
// page shows them, the tool results they carry, and whether it is between members.
import { state } from "./store";
import type { Message, ToolResult } from "./types";

export interface Item {
  readonly message: Message;
  readonly queued: boolean;
}

/** A conversation between family members: the id alone says so, as on the server. */
export const isShared = (id: string | null): boolean => /^(dm|fc)_/.test(id || "");

/** Whether the open conversation (or the new one) is between family members. */
export function shared(): boolean {
  const { target, conversationId } = state();
  return Boolean(target) || isShared(conversationId);
}

/** Every message: the archive's, the stored ones, the one streaming, the queued ones. */
export function everything(): Item[] {
  const { conversation: conv, earlier } = state();
  if (!conv) return [];
  const live = conv.messages || [];
  const ids = new Set(live.map((m) => m.id));
  const items = earlier.filter((m) => !ids.has(m.id)).map((m) => ({ message: m, queued: false }));
  for (const m of live) items.push({ message: m, queued: false });
  const active = conv.activeRun && conv.activeRun.message;
  if (active && !ids.has(active.id)) items.push({ message: active, queued: false });
  for (const m of conv.queuedMessages || []) items.push({ message: m, queued: true });
  return items;
}

const VISIBLE = new Set(["text", "image", "file", "tool_call"]);

/** What a person sees: a message holding only tool results (hidden or not) shows
 * nothing, and a reply made again shows only its newest version. */
export function shown(): Item[] {
  const all = everything();
  const older = superseded(all);
  return all.filter(
    ({ message }) =>
      !older.has(message.id) &&
      (message.status !== "complete" || (message.content || []).some((p) => VISIBLE.has(p.type))),
  );
}

/** The ids of the replies a later one was made again from (DESIGN §15: append-only, so
 * the old reply stays in the document; a chain shows its newest). A reply made again
 * is the messages after its user turn up to it (its tool steps included). The field is
 * read whatever its type, as an api older or newer than this page may write it. */
export function superseded(items: readonly Item[]): Set<string> {
  const gone = new Set<string>();
  const at = new Map(items.map(({ message }, index) => [message.id, index]));
  for (const { message } of items) {
    const from: unknown = (message as { regenerates?: unknown }).regenerates;
    const index = typeof from === "string" ? at.get(from) : undefined;
    if (index === undefined) continue;
    for (let n = index; n >= 0; n--) {
      const older = items[n]?.message;
      if (!older || older.role === "user") break;
      gone.add(older.id);
    }
  }
  return gone;
}

/** toolCallId → its result, from every message. */
export function results(): Map<string, ToolResult> {
  const found = new Map<string, ToolResult>();
  for (const { message } of everything()) {
    for (const part of message.content || []) {
      if (part.type === "tool_result" && part.toolResult) found.set(part.toolResult.toolCallId, part.toolResult);
    }
  }
  return found;
}

/** The id of the shown message holding the call `callId`. */
export function messageOf(callId: string): string | null {
  for (const { message } of shown()) {
    if ((message.content || []).some((p) => p.type === "tool_call" && p.toolCall && p.toolCall.id === callId)) return message.id;
  }
  return null;
}
