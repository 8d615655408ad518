// Everything around the message log: the heading, the run's controls and what it waits
// for, and the calls waiting for the owner's approval (the conversation list: list.ts).
import { decide } from "../actions";
import { shared } from "../conversation";
import { $, button, el } from "../dom";
import { session } from "../session";
import { state } from "../store";
import type { ToolCall } from "../types";
import { authorNames, sharedTitle } from "./family";

// Who the open shared conversation is with: a member's name or the family's.
function sharedName(): string | null {
  const mirror = session().family.family;
  const { target, conversation, listed, user } = state();
  if (target && "targetFamily" in target) return (mirror && mirror.name) || "your family";
  if (target) {
    const member = mirror && (mirror.members || []).find((m) => m.userId === target.targetUserId);
    return member ? member.displayName : "a family member";
  }
  return sharedTitle(conversation, mirror, user?.uid ?? "", authorNames(listed.map((entry) => entry.data)));
}

export function renderHeading(): void {
  const { conversation: conv, conversationId, target } = state();
  let title = conversationId ? "Conversation" : "New conversation";
  let placeholder = "Ask Spark AI Agent…";
  const name = shared() && sharedName();
  if (name) {
    const direct = target ? "targetUserId" in target : Boolean(conversationId && conversationId.startsWith("dm_"));
    title = `${name} (${direct ? "direct messages" : "family messages"})`;
    placeholder = `Write to ${name}…`;
  } else if (conv && conv.title) {
    title = conv.title;
  }
  if ($("chat-title").textContent !== title) $("chat-title").textContent = title;
  $<HTMLTextAreaElement>("composer-text").placeholder = placeholder;
}

/** The run's controls: Stop (not in a shared conversation), the earlier messages'
 * button, and what the run waits for, in the status line. */
export function renderRun(): void {
  const { conversation: conv, loadedSegments } = state();
  const archived = conv && conv.archived;
  $("earlier").hidden = !(archived && archived.segments > loadedSegments);
  const run = conv && conv.activeRun;
  const stop = $<HTMLButtonElement>("stop");
  stop.hidden = shared();
  stop.disabled = !run || Boolean(run.stopRequestedAt);
  // Said once when it changes, so what the page said in between (an error) stays.
  const waiting = (run && run.waitingFor) || "";
  const status = $("composer-status");
  if (waiting !== status.dataset.waiting) {
    status.dataset.waiting = waiting;
    status.textContent = waiting;
  }
}

/** One approval card: the action and its object in the server's words (the call's
 * `displayText`: "Delete the lesson “Tides”", "Send to Mum: “…”"), the tool and its raw
 * arguments behind "Details" for those who want them, then Approve and Deny. */
function approvalCard(call: ToolCall): HTMLLIElement {
  const headId = `approval-${call.id}`;
  const ask = el("p", { className: "ask", id: headId }, el("strong", { text: call.displayText || call.name }));
  const args = el("pre", { "aria-label": "Arguments" });
  try {
    args.textContent = JSON.stringify(JSON.parse(call.argsJson), null, 2);
  } catch {
    args.textContent = call.argsJson;
  }
  const details = el("details", {}, el("summary", { text: "Details" }), el("p", { text: `Tool: ${call.name}` }), args);
  const card = el("li", { className: "approval", "aria-labelledby": headId }, ask, details);
  card.append(button("Approve", () => decide(call, true)), button("Deny", () => decide(call, false)));
  return card;
}

export function renderApprovals(): void {
  const { conversation: conv } = state();
  const waiting: ToolCall[] = [];
  for (const message of (conv && conv.messages) || []) {
    for (const part of message.content || []) {
      if (part.type === "tool_call" && part.toolCall && part.toolCall.status === "awaiting_approval") waiting.push(part.toolCall);
    }
  }
  $("approvals").hidden = !waiting.length;
  const list = $("approval-list");
  const ids = waiting.map((c) => c.id).join(",");
  if (list.dataset.ids === ids) return;
  list.dataset.ids = ids;
  list.replaceChildren(...waiting.map(approvalCard));
}
