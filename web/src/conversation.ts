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

/** What a person sees: a message holding only tool results (hidden or not) shows nothing. */
export function shown(): Item[] {
  return everything().filter(
    ({ message }) => message.status !== "complete" || (message.content || []).some((p) => VISIBLE.has(p.type)),
  );
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
