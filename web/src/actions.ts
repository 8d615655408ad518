// Acting on the open conversation through the api: stop it, answer a question, decide
// an approval, carry out the client tools the page runs itself, cancel a task, rate a
// reply and make the last one again. What
// happens next is shown when Firestore says so; the composer's status line says what
// went wrong.
import { ApiError } from "./api";
import { results } from "./conversation";
import { $ } from "./dom";
import { session } from "./session";
import { setQuestion, state } from "./store";
import type { Message, QuestionState, Schemas, TaskDocument, ToolCall } from "./types";
import { controlsRefusal } from "./views/safety";

// The client tool calls this page has answered, the approvals it has sent and the tasks
// it has asked to cancel: once each.
const done = { posted: new Set<string>(), deciding: new Set<string>(), cancelling: new Set<string>() };

/** Shows `text` in the composer's status line. */
export function say(text: string): void {
  $("composer-status").textContent = text;
}

export async function stop(): Promise<void> {
  const { conversationId } = state();
  if (!conversationId) return;
  try {
    await session().api.stop(conversationId);
    say("Stopping…");
  } catch (error) {
    say((error as Error).message);
  }
}

export async function answer(call: ToolCall, q: QuestionState): Promise<void> {
  const { conversationId } = state();
  if (!conversationId) return;
  const answers: Schemas["AnswersRequest"]["answers"] = {};
  Object.entries(q.answers).forEach(([i, value]) => { answers[String(i)] = typeof value === "string" ? value : [...value]; });
  try {
    await session().api.answer(conversationId, call.id, answers);
    setQuestion(call.id, null);
    say("");
  } catch (error) {
    say((error as Error).message);
  }
}

export async function decide(call: ToolCall, approved: boolean): Promise<void> {
  const { conversationId } = state();
  if (!conversationId || done.deciding.has(call.id)) return;
  done.deciding.add(call.id);
  try {
    await session().api.approve(conversationId, call.id, approved);
    say(approved ? "Approved." : "Denied.");
  } catch (error) {
    done.deciding.delete(call.id);
    say((error as Error).message);
  }
}

// Client tools the page carries out itself: only once their message has ended (the
// api refuses a result before the call is saved), once per call per page.
export function carryOutClientTools(): void {
  const { conversation: conv, conversationId } = state();
  if (!conv || !conversationId) return;
  const found = results();
  for (const message of conv.messages || []) {
    for (const part of message.content || []) {
      const call = part.type === "tool_call" ? part.toolCall : null;
      if (!call || call.execution !== "client" || call.status !== "pending") continue;
      if (found.has(call.id) || done.posted.has(call.id)) continue;
      done.posted.add(call.id);
      const [output, status] = clientTool(call);
      session()
        .api.toolResult(conversationId, { toolCallId: call.id, output, status })
        .catch((error: unknown) => {
          if (error instanceof ApiError && error.status === 409 && error.code === "run_in_progress") done.posted.delete(call.id);
        });
    }
  }
}

function clientTool(call: ToolCall): [unknown, "ok" | "error"] {
  if (call.name !== "get_editor_selection") return [{ error: `This page cannot run ${call.name}.` }, "error"];
  const editor = $<HTMLTextAreaElement>("editor");
  const selection = editor.value.slice(editor.selectionStart, editor.selectionEnd);
  const { conversation } = state();
  return [{ documentId: (conversation && conversation.documentId) || null, selection }, "ok"];
}

/** Cancels `task`: at once if it had not started or waits for an answer, else at its
 * tool's next step. Its section says "cancelled" when Firestore does. */
export async function cancelTask(task: TaskDocument): Promise<void> {
  if (done.cancelling.has(task.id)) return;
  done.cancelling.add(task.id);
  try {
    const answered = await session().api.cancelTask(task.id);
    say(answered.status === "cancelled" ? `Cancelled: ${task.title}.` : `Cancelling: ${task.title}…`);
  } catch (error) {
    done.cancelling.delete(task.id);
    say((error as Error).message);
  }
}

/** Rates a reply ("up" or "down"): the buttons show the rating when Firestore has it. */
export async function rate(message: Message, rating: "up" | "down"): Promise<void> {
  const { conversationId } = state();
  if (!conversationId) return;
  try {
    await session().api.rate(conversationId, message.id, rating);
    say(rating === "up" ? "Thank you: marked as helpful." : "Thank you: marked as not helpful.");
  } catch (error) {
    say((error as Error).message);
  }
}

/** Asks for the last reply again. The new reply, appended with `regenerates` naming
 * this one, takes its place on the page when Firestore has it. Rejects if refused. */
export async function regenerate(message: Message): Promise<void> {
  const { conversationId } = state();
  if (!conversationId) return;
  try {
    await session().api.regenerate(conversationId, message.id);
    say("Writing the reply again…");
  } catch (error) {
    // A new turn: a dependent's parent's controls may refuse it, said by their reason.
    say(controlsRefusal(error) ?? (error as Error).message);
    throw error;
  }
}
