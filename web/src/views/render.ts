// One message as an <article>, built from its Firestore form (DESIGN §3): the author,
// its tool steps (a spinner while they run, then ✓ or ✗ and their displayText, folded
// into "Done (N steps)" once the reply has ended), question cards, attachments and its
// text as sanitised Markdown. Hidden tool results are never shown.
import { el } from "../dom";
import type { ContentPart, Message, QuestionState, TaskDocument, ToolCall, ToolResult } from "../types";
import { markdown } from "./markdown";

const RUNNING = new Set(["pending", "queued", "running", "awaiting_approval"]);
const ENDED = new Set(["complete", "error", "stopped", "waiting", "withheld"]);

/** What an article is built with besides its message. */
export interface ArticleContext {
  uid: string;
  /** toolCallId → its result, from every message. */
  results: ReadonlyMap<string, ToolResult>;
  /** toolCallId → its task section. */
  tasks: ReadonlyMap<string, TaskDocument>;
  /** Message ids whose "Done (N steps)" is open. */
  expanded: ReadonlySet<string>;
  questions: ReadonlyMap<string, QuestionState>;
  queued: boolean;
  onToggle: (messageId: string) => void;
  onPick: (call: ToolCall, q: QuestionState, question: Question, label: string) => void;
  onNext: (call: ToolCall, q: QuestionState) => void;
  onAnswer: (call: ToolCall, q: QuestionState) => void;
  onCancel: (task: TaskDocument) => void;
  loadFile: (path: string) => Promise<string | null>;
  /** A conversation with the agent (its replies can be rated and made again). */
  agent: boolean;
  /** The id of the last reply, once it has ended and nothing runs: it has "Regenerate". */
  lastReply: string | null;
  onRate: (message: Message, rating: "up" | "down") => void;
  onRegenerate: (message: Message) => Promise<void>;
}

/** One card of an ask_user_question call (its arguments, which the model wrote). */
export interface Question {
  header: string;
  question: string;
  multiSelect?: boolean;
  options: { label: string; description?: string }[];
}

export const FIRST_CARD: QuestionState = { index: 0, answers: {}, picked: [] };

/** Who wrote `message`, as its article is named. */
export function authorName(message: Message, uid: string): string {
  if (message.role === "assistant") return "Spark AI Agent";
  const author = message.author;
  if (message.role === "user" && author && author.userId && author.userId !== uid) {
    return author.displayName || "A family member";
  }
  if (message.role === "user") return "You";
  return "Spark AI Agent";
}

function textOf(message: Message): string {
  return (message.content || []).filter((p) => p.type === "text").map((p) => p.text || "").join("");
}

type Step = "ok" | "error" | "running";

function stepState(call: ToolCall, result: ToolResult | undefined): Step {
  if (result) return result.status === "error" ? "error" : "ok";
  if (call.status === "complete") return "ok";
  if (call.status === "error" || call.status === "denied") return "error";
  return RUNNING.has(call.status) ? "running" : "ok";
}

function stepItem(call: ToolCall, result: ToolResult | undefined, task: TaskDocument | undefined, onCancel: (task: TaskDocument) => void): HTMLLIElement {
  const state = stepState(call, result);
  const icon =
    state === "running"
      ? el("span", { className: "spinner", role: "img", "aria-label": "in progress" })
      : el("span", { className: `mark ${state}`, role: "img", "aria-label": state === "ok" ? "done" : "failed", text: state === "ok" ? "✓" : "✗" });
  const item = el("li", { className: `step ${state}` }, icon, el("span", { text: ` ${call.displayText || call.name}` }));
  if (task) item.append(taskSection(task, onCancel));
  return item;
}

// A task's status as its section says it.
const TASK_STATUS: Record<TaskDocument["status"], string> = {
  queued: "queued",
  running: "running",
  waiting_on_user: "waiting for your answer",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
};
// What a key output is, in words (the kinds shared/schemas/documents/tasks.py names).
const OUTPUT_KINDS: Record<string, string> = {
  lesson: "Lesson",
  planned_lesson: "Planned lesson",
  strength: "Strength",
  correction: "Correction",
  mark: "Mark",
  try: "What to try",
};
// Statuses a task can still be cancelled in (the api ends a waiting one at once too).
const CANCELLABLE = new Set<TaskDocument["status"]>(["queued", "running", "waiting_on_user"]);

/** A task's section (/{uid}/client/tasks/{taskId}) inside its step: its status, its
 * progress steps in order (the server folds the oldest past forty into one line), the
 * question it waits on, its summary and key outputs, and Cancel while it can be. */
export function taskSection(task: TaskDocument, onCancel?: (task: TaskDocument) => void): HTMLElement {
  const section = el("section", { className: `task ${task.status}`, "aria-label": `Task: ${task.title}`, "data-task-id": task.id });
  section.append(el("p", { className: "task-head" }, el("strong", { text: task.title }), el("span", { className: "badge", text: `: ${TASK_STATUS[task.status] ?? task.status}` })));
  const updates = task.updates || [];
  if (updates.length) {
    const steps = updates.map((u) => el("li", { text: u.folded ? `… ${u.folded} earlier steps` : u.text }));
    section.append(el("ol", { className: "updates", "aria-label": "Progress" }, ...steps));
  }
  if (task.status === "waiting_on_user" && task.question) {
    section.append(el("p", { className: "task-question" }, el("strong", { text: "Waiting for your answer: " }), document.createTextNode(task.question)));
  }
  if (task.summary) section.append(el("div", { className: "summary" }, markdown(task.summary)));
  for (const output of task.keyOutputs || []) {
    const kind = OUTPUT_KINDS[output.kind] ?? output.kind;
    section.append(el("p", { className: "output" }, el("span", { className: "kind", text: `${kind}: ` }), document.createTextNode(output.text)));
  }
  if (onCancel && CANCELLABLE.has(task.status)) {
    const cancel = el("button", { type: "button", className: "quiet cancel", text: "Cancel" });
    cancel.addEventListener("click", () => {
      cancel.disabled = true;
      onCancel(task);
    });
    section.append(cancel);
  }
  return section;
}

function questionsOf(call: ToolCall): Question[] | null {
  try {
    return (JSON.parse(call.argsJson) as { questions?: Question[] }).questions || [];
  } catch {
    return null;
  }
}

function questionCard(call: ToolCall, context: ArticleContext): HTMLElement | null {
  const questions = questionsOf(call);
  if (!questions) return null;
  const state = context.questions.get(call.id) || FIRST_CARD;
  const card = el("section", { className: "question", "aria-label": "Question from Spark AI Agent" });
  const q = questions[state.index];
  if (!q) {
    const summary = el("ul", { className: "answers" }, ...questions.map((q, i) => el("li", { text: `${q.header}: ${([] as string[]).concat(state.answers[i] ?? []).join(", ")}` })));
    const go = el("button", { type: "button", className: "continue", "aria-label": "Continue", text: "Continue →" });
    go.addEventListener("click", () => context.onAnswer(call, state));
    card.append(el("p", { text: "Your answers" }), summary, go);
    return card;
  }
  card.append(
    el("p", { className: "q-header", text: `${q.header} (${state.index + 1} of ${questions.length})` }),
    el("p", { className: "q-text", text: q.question }),
  );
  const options = el("div", { className: "options", role: "group", "aria-label": q.question });
  for (const option of q.options) {
    const pressed = q.multiSelect ? state.picked.includes(option.label) : undefined;
    const button = el("button", { type: "button", className: "option", "aria-pressed": pressed === undefined ? undefined : String(pressed), text: option.label });
    if (option.description) button.title = option.description;
    button.addEventListener("click", () => context.onPick(call, state, q, option.label));
    options.append(button);
    if (option.description) options.append(el("span", { className: "option-help", text: option.description }));
  }
  card.append(options);
  if (q.multiSelect) {
    const next = el("button", { type: "button", className: "continue", text: "Next" });
    next.addEventListener("click", () => context.onNext(call, state));
    card.append(next);
  }
  return card;
}

function attachment(part: ContentPart, context: ArticleContext): HTMLElement {
  const file = part.file;
  const path = file ? file.storagePath : "";
  const name = (file && file.name) || path.split("/").pop() || "";
  if (part.type === "image") {
    const img = el("img", { className: "attachment", alt: name, width: file?.width, height: file?.height });
    context.loadFile(path).then((url) => { if (url) img.src = url; });
    return el("figure", {}, img, el("figcaption", { text: name }));
  }
  const count = file && file.pageCount;
  const pages = count ? `, ${count} page${count === 1 ? "" : "s"}` : "";
  return el("p", { className: "file" }, el("span", { text: `📄 ${name}${pages}` }));
}

/** Under a finished reply: "Helpful" and "Not helpful" (toggles showing the rating kept
 * on the message, `feedback`), and on the last reply "Regenerate". */
function replyActions(message: Message, context: ArticleContext): HTMLElement {
  const rating = message.feedback ? message.feedback.rating : null;
  const group = el("div", { className: "reply-actions", role: "group", "aria-label": "This reply" });
  // Words, not emoji: seen as they are heard, whatever fonts the device has.
  const rate = (value: "up" | "down", label: string) => {
    const made = el("button", { type: "button", className: "quiet rate", "aria-pressed": String(rating === value), text: label });
    made.addEventListener("click", () => context.onRate(message, value));
    return made;
  };
  group.append(rate("up", "Helpful"), rate("down", "Not helpful"));
  if (context.lastReply === message.id) {
    const again = el("button", { type: "button", className: "quiet regenerate", text: "Regenerate" });
    again.addEventListener("click", () => {
      again.disabled = true;
      context.onRegenerate(message).catch(() => { again.disabled = false; });
    });
    group.append(again);
  }
  return group;
}

/** The calls a message makes, in order. */
export function callsOf(message: Message): ToolCall[] {
  return (message.content || []).flatMap((p) => (p.type === "tool_call" && p.toolCall ? [p.toolCall] : []));
}

/** The article of `message`. */
export function renderMessage(message: Message, context: ArticleContext): HTMLElement {
  const who = authorName(message, context.uid);
  const headId = `h-${message.id}`;
  const theirs = who !== "You" && message.role === "user";
  const article = el("article", {
    className: `message ${message.role}${theirs ? " theirs" : ""} ${message.status}${context.queued ? " queued" : ""}`,
    "aria-labelledby": headId,
    "aria-busy": message.status === "streaming" ? "true" : undefined,
    "data-message-id": message.id,
    "data-status": context.queued ? "queued" : message.status,
  });
  article.append(el("h3", { id: headId, className: "author", text: who }));

  const calls = callsOf(message);
  const steps = calls.filter((c) => c.execution !== "question");
  if (steps.length) {
    const running = steps.some((c) => stepState(c, context.results.get(c.id)) === "running");
    // Folded once the message has ended and none of its steps is still under way (a
    // "waiting" message whose calls all have their results included).
    const folded = ENDED.has(message.status) && !running;
    const list = el("ul", { className: "steps", id: `steps-${message.id}` }, ...steps.map((c) => stepItem(c, context.results.get(c.id), context.tasks.get(c.id), context.onCancel)));
    if (folded) {
      const open = context.expanded.has(message.id);
      const label = `Done (${steps.length} step${steps.length === 1 ? "" : "s"})`;
      const toggle = el("button", { type: "button", className: "done", "aria-expanded": String(open), "aria-controls": list.id, text: `${open ? "▾" : "▸"} ${label}` });
      toggle.setAttribute("aria-label", label);
      toggle.addEventListener("click", () => context.onToggle(message.id));
      list.hidden = !open;
      article.append(toggle, list);
    } else {
      article.append(list);
    }
  }
  for (const part of message.content || []) {
    if (part.type === "image" || part.type === "file") article.append(attachment(part, context));
  }
  const text = textOf(message);
  if (text) article.append(el("div", { className: "text" }, markdown(text)));
  for (const call of calls) {
    if (call.execution === "question" && call.status === "pending" && !context.results.has(call.id)) {
      const card = questionCard(call, context);
      if (card) article.append(card);
    }
  }
  if (context.agent && message.role === "assistant" && message.status === "complete") article.append(replyActions(message, context));
  // A member's message their agent sent, with their approval of this exact text.
  if (message.via === "agent") article.append(el("p", { className: "note", text: "Sent by Spark AI Agent, as approved." }));
  if (context.queued) article.append(el("p", { className: "note", text: "Queued: sent after the reply in progress." }));
  else if (message.status === "stopped") article.append(el("p", { className: "note", text: "Stopped." }));
  else if (message.status === "error") article.append(el("p", { className: "note error", text: (message.error && message.error.message) || "Something went wrong." }));
  return article;
}
