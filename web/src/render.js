// One message as an <article>, built from its Firestore form (DESIGN §3): the author,
// its tool steps (a spinner while they run, then ✓ or ✗ and their displayText, folded
// into "Done (N steps)" once the reply has ended), question cards, attachments and its
// text as sanitised Markdown. Hidden tool results are never shown.
import { markdown } from "./markdown.js";

const RUNNING = new Set(["pending", "queued", "running", "awaiting_approval"]);
const ENDED = new Set(["complete", "error", "stopped", "waiting"]);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

/** Who wrote `message`, as its article is named. */
export function authorName(message, uid) {
  if (message.role === "assistant") return "Spark AI Agent";
  const author = message.author;
  if (message.role === "user" && author && author.userId && author.userId !== uid) {
    return author.displayName || "A family member";
  }
  if (message.role === "user") return "You";
  return "Spark AI Agent";
}

function textOf(message) {
  return (message.content || []).filter((p) => p.type === "text").map((p) => p.text || "").join("");
}

function stepState(call, result) {
  if (result) return result.status === "error" ? "error" : "ok";
  if (call.status === "complete") return "ok";
  if (call.status === "error" || call.status === "denied") return "error";
  return RUNNING.has(call.status) ? "running" : "ok";
}

function stepItem(call, result, task) {
  const state = stepState(call, result);
  const icon =
    state === "running"
      ? el("span", { className: "spinner", role: "img", "aria-label": "in progress" })
      : el("span", { className: `mark ${state}`, role: "img", "aria-label": state === "ok" ? "done" : "failed", text: state === "ok" ? "✓" : "✗" });
  const item = el("li", { className: `step ${state}` }, icon, el("span", { text: ` ${call.displayText || call.name}` }));
  if (task) item.append(taskSection(task));
  return item;
}

/** A task's section (/{uid}/client/tasks/{taskId}) inside its step. */
export function taskSection(task) {
  const section = el("section", { className: `task ${task.status}`, "aria-label": `Task: ${task.title}` });
  section.append(el("p", { className: "task-head" }, el("strong", { text: task.title }), el("span", { className: "badge", text: `: ${task.status.replaceAll("_", " ")}` })));
  const updates = (task.updates || []).slice(-5);
  if (updates.length) {
    section.append(el("ul", { className: "updates" }, ...updates.map((u) => el("li", { text: u.folded ? `… ${u.folded} earlier steps` : u.text }))));
  }
  if (task.summary) section.append(el("div", { className: "summary" }, markdown(task.summary)));
  for (const output of task.keyOutputs || []) {
    section.append(el("p", { className: "output" }, el("span", { className: "kind", text: `${output.kind}: ` }), document.createTextNode(output.text)));
  }
  return section;
}

function questionCard(call, context) {
  let questions = [];
  try {
    questions = JSON.parse(call.argsJson).questions || [];
  } catch {
    return null;
  }
  const state = context.questions.get(call.id) || { index: 0, answers: {}, picked: [] };
  context.questions.set(call.id, state);
  const card = el("section", { className: "question", "aria-label": "Question from Spark AI Agent" });
  if (state.index >= questions.length) {
    const summary = el("ul", { className: "answers" }, ...questions.map((q, i) => el("li", { text: `${q.header}: ${[].concat(state.answers[i]).join(", ")}` })));
    const go = el("button", { type: "button", className: "continue", "aria-label": "Continue", text: "Continue →" });
    go.addEventListener("click", () => context.onAnswer(call, state));
    card.append(el("p", { text: "Your answers" }), summary, go);
    return card;
  }
  const q = questions[state.index];
  card.append(
    el("p", { className: "q-header", text: `${q.header} (${state.index + 1} of ${questions.length})` }),
    el("p", { className: "q-text", text: q.question }),
  );
  const options = el("div", { className: "options", role: "group", "aria-label": q.question });
  for (const option of q.options) {
    const pressed = q.multiSelect ? state.picked.includes(option.label) : undefined;
    const button = el("button", { type: "button", className: "option", "aria-pressed": pressed === undefined ? undefined : String(pressed), "aria-describedby": undefined, text: option.label });
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

function attachment(part, context) {
  const file = part.file || {};
  const name = file.name || file.storagePath.split("/").pop();
  if (part.type === "image") {
    const img = el("img", { className: "attachment", alt: name, width: file.width, height: file.height });
    context.loadFile(file.storagePath).then((url) => { if (url) img.src = url; });
    return el("figure", {}, img, el("figcaption", { text: name }));
  }
  const pages = file.pageCount ? `, ${file.pageCount} page${file.pageCount === 1 ? "" : "s"}` : "";
  return el("p", { className: "file" }, el("span", { text: `📄 ${name}${pages}` }));
}

/**
 * The article of `message`. `context`: {uid, results: Map toolCallId→toolResult,
 * tasks: Map toolCallId→task document, expanded: Set of message ids, questions: Map,
 * onAnswer, onPick, onNext, onToggle, loadFile, queued: bool}.
 */
export function renderMessage(message, context) {
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

  const calls = (message.content || []).filter((p) => p.type === "tool_call").map((p) => p.toolCall);
  const steps = calls.filter((c) => c.execution !== "question");
  if (steps.length) {
    const running = steps.some((c) => stepState(c, context.results.get(c.id)) === "running");
    // Folded once the message has ended and none of its steps is still under way (a
    // "waiting" message whose calls all have their results included).
    const folded = ENDED.has(message.status) && !running;
    const list = el("ul", { className: "steps", id: `steps-${message.id}` }, ...steps.map((c) => stepItem(c, context.results.get(c.id), context.tasks.get(c.id))));
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
  // A member's message their agent sent, with their approval of this exact text.
  if (message.via === "agent") article.append(el("p", { className: "note", text: "Sent by Spark AI Agent, as approved." }));
  if (context.queued) article.append(el("p", { className: "note", text: "Queued: sent after the reply in progress." }));
  else if (message.status === "stopped") article.append(el("p", { className: "note", text: "Stopped." }));
  else if (message.status === "error") article.append(el("p", { className: "note error", text: (message.error && message.error.message) || "Something went wrong." }));
  return article;
}
