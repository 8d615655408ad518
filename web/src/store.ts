// The page's state, in one place. Nothing outside this module assigns to it: a change
// is `update({...})` (or one of the named updates below), which makes a new state and
// tells the views, which render from it. Caches that only one module reads (the
// articles already built, the object URLs of files, the listeners to stop) stay private
// to that module; the family panel keeps its own (family.ts).
import type { User } from "firebase/auth";
import type { Attachment, Conversation, Message, QuestionState, Schemas, Target, TaskDocument } from "./types";

/** A conversation as the list shows it. */
export interface Listed {
  readonly id: string;
  readonly data: Conversation;
}

export interface State {
  readonly user: User | null;
  /** The open conversation, or null for a new one (with the agent, or `target`). */
  readonly conversationId: string | null;
  readonly target: Target | null;
  /** The open conversation's document, as its listener last heard it. */
  readonly conversation: Conversation | null;
  /** The conversation list's documents, newest first. */
  readonly listed: readonly Listed[];
  /** Messages read from the archive, oldest first, and how many segments they came from. */
  readonly earlier: readonly Message[];
  readonly loadedSegments: number;
  /** toolCallId → the task section of the open conversation. */
  readonly tasks: ReadonlyMap<string, TaskDocument>;
  /** Message ids whose "Done (N steps)" is open. */
  readonly expanded: ReadonlySet<string>;
  /** toolCallId → where the user is in that question's cards. */
  readonly questions: ReadonlyMap<string, QuestionState>;
  /** Uploaded, waiting for the next send. */
  readonly attachments: readonly Attachment[];
  /** GET /agent/model: which model answers, asked once a sign-in. */
  readonly model: Schemas["ModelResponse"] | null;
}

const EMPTY: State = {
  user: null,
  conversationId: null,
  target: null,
  conversation: null,
  listed: [],
  earlier: [],
  loadedSegments: 0,
  tasks: new Map(),
  expanded: new Set(),
  questions: new Map(),
  attachments: [],
  model: null,
};

let current: State = EMPTY;
const views: (() => void)[] = [];

/** The state now (read-only: change it with `update`). */
export function state(): State {
  return current;
}

/** Change some fields; the views render the new state at once. */
export function update(change: Partial<State>): void {
  current = { ...current, ...change };
  for (const view of views) view();
}

/** Calls `view` after every update. */
export function onUpdate(view: () => void): void {
  views.push(view);
}

// ---- named updates, for the fields that are collections --------------------------------

export function toggleExpanded(messageId: string): void {
  const expanded = new Set(current.expanded);
  if (!expanded.delete(messageId)) expanded.add(messageId);
  update({ expanded });
}

export function setQuestion(callId: string, question: QuestionState | null): void {
  const questions = new Map(current.questions);
  if (question) questions.set(callId, question);
  else questions.delete(callId);
  update({ questions });
}

export function addAttachment(attachment: Attachment): void {
  update({ attachments: [...current.attachments, attachment] });
}

export function removeAttachment(index: number): void {
  update({ attachments: current.attachments.filter((_, i) => i !== index) });
}

/** Something the views read outside this state has changed (the family panel's mirror,
 * family.ts): they render again. */
export function changed(): void {
  update({});
}
