// The conversation's articles, kept in step with the state. An article is built again
// only when something it shows has changed. What can change a message once written is
// known from its schema: its status, its parts (appended), its text (growing while it
// streams), its files (an upload's part replaced by the normalised file's), its calls'
// statuses; beside it, its calls' results (which later messages
// carry) and task sections (whose documents carry updatedAt), and in the page, whether
// its steps are open and where the user is in its question cards. Those, and nothing
// else, make its revision; the articles are matched by message id.
import { answer, cancelTask, rate, regenerate } from "../actions";
import { type Item, messageOf, results, shared, shown } from "../conversation";
import { $ } from "../dom";
import { loadFile } from "../files";
import { setQuestion, state, toggleExpanded } from "../store";
import type { Message, Timestamp, ToolResult } from "../types";
import { type ArticleContext, callsOf, renderMessage } from "./render";

interface Built {
  readonly article: HTMLElement;
  readonly revision: string;
}

// message id → its article and the revision it was built from, for one conversation.
const built = { conversation: "", articles: new Map<string, Built>() };

const stamp = (t: Timestamp | undefined): string => (t ? `${t.seconds}.${t.nanoseconds}` : "");

/** What the article of `message` shows, as one comparable string. */
function revision(message: Message, queued: boolean, found: ReadonlyMap<string, ToolResult>, last: string | null): string {
  const { tasks, expanded, questions } = state();
  const parts = message.content || [];
  const text = parts.reduce((n, p) => n + (p.type === "text" ? (p.text || "").length : 0), 0);
  const calls = callsOf(message).map((call) => {
    const result = found.get(call.id);
    const task = tasks.get(call.id);
    const q = questions.get(call.id);
    const where = q ? `${q.index}:${q.picked.join("\u0001")}` : "";
    return `${call.id}:${call.status}:${result ? result.status : ""}:${stamp(task && task.updatedAt)}:${where}`;
  });
  const files = parts.flatMap((p) => (p.file ? [p.file.storagePath] : []));
  const open = expanded.has(message.id) ? "open" : "";
  // Its rating, and whether it is the last reply (which has "Regenerate").
  const rated = `${message.feedback ? message.feedback.rating : ""}${last === message.id ? ":last" : ""}`;
  return [message.status, queued ? "queued" : "", parts.length, text, open, rated, ...files, ...calls].join("|");
}

/** The last reply, if it can be made again: it has ended and nothing runs or waits. */
function lastReply(items: readonly Item[]): string | null {
  const { conversation } = state();
  if (!conversation || conversation.activeRun || (conversation.queuedMessages || []).length) return null;
  const last = items[items.length - 1];
  return last && last.message.role === "assistant" && last.message.status === "complete" ? last.message.id : null;
}

function context(queued: boolean, found: ReadonlyMap<string, ToolResult>, last: string | null): ArticleContext {
  const { user, tasks, expanded, questions } = state();
  return {
    agent: !shared(),
    lastReply: last,
    onRate: (message, rating) => rate(message, rating),
    onRegenerate: (message) => regenerate(message),
    uid: user?.uid ?? "",
    results: found,
    tasks,
    expanded,
    questions,
    queued,
    onToggle: (id) => {
      toggleExpanded(id);
      focusIn(id, "button.done");
    },
    onPick: (call, q, question, label) => {
      if (question.multiSelect) {
        const picked = q.picked.includes(label) ? q.picked.filter((l) => l !== label) : [...q.picked, label];
        setQuestion(call.id, { ...q, picked });
        focusIn(messageOf(call.id), "button.option[aria-pressed]");
        return;
      }
      setQuestion(call.id, { ...q, answers: { ...q.answers, [q.index]: label }, index: q.index + 1 });
      focusIn(messageOf(call.id), "section.question button");
    },
    onNext: (call, q) => {
      if (!q.picked.length) return;
      setQuestion(call.id, { answers: { ...q.answers, [q.index]: q.picked }, picked: [], index: q.index + 1 });
      focusIn(messageOf(call.id), "section.question button");
    },
    onAnswer: (call, q) => answer(call, q),
    onCancel: (task) => cancelTask(task),
    loadFile,
  };
}

/** Moves the focus to the first `selector` in the article of `messageId`. */
function focusIn(messageId: string | null, selector: string): void {
  const entry = messageId ? built.articles.get(messageId) : undefined;
  const target = entry && entry.article.querySelector<HTMLElement>(selector);
  if (target) target.focus();
}

/** Brings the message log in step with the state. */
export function renderMessages(): void {
  const container = $("messages");
  const { conversationId, user } = state();
  const conversation = `${user?.uid}/${conversationId}`;
  if (built.conversation !== conversation) {
    built.conversation = conversation;
    built.articles.clear();
    container.replaceChildren();
  }
  const items = shown();
  const found = results();
  const last = lastReply(items);
  const wanted: HTMLElement[] = [];
  for (const { message, queued } of items) {
    const now = revision(message, queued, found, last);
    let entry = built.articles.get(message.id);
    if (!entry || entry.revision !== now) {
      const fresh = renderMessage(message, context(queued, found, last));
      if (entry) entry.article.replaceWith(fresh);
      entry = { article: fresh, revision: now };
      built.articles.set(message.id, entry);
    }
    // An ended message with nothing to show but its author (its only call a question
    // already answered, say) gets no article; one streaming keeps its article while empty.
    if (entry.article.childElementCount > 1 || message.status === "streaming") wanted.push(entry.article);
  }
  const keep = new Set<Element>(wanted);
  for (const child of [...container.children]) if (!keep.has(child)) child.remove();
  wanted.forEach((article, index) => {
    if (container.children[index] !== article) container.insertBefore(article, container.children[index] || null);
  });
  const ids = new Set(items.map((i) => i.message.id));
  for (const id of [...built.articles.keys()]) if (!ids.has(id)) built.articles.delete(id);
}
