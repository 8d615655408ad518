// The documents the client reads, the bodies it sends and receives and the events a
// reply streams, as generated from schemas/ (tools/webtypes.py), and the few shapes
// that live only in the page.
import type { components } from "../generated/openapi";

export type { ArchiveSegment } from "../generated/archive";
export type { SseEvent } from "../generated/events";
export type { FamilyMember, FamilyMirror } from "../generated/family";
export type { ContentPart, Conversation, Message, Timestamp, ToolCall, ToolResult } from "../generated/firestore";
export type { Lesson } from "../generated/lesson";
export type { SafetyFlag, SafetyMirror } from "../generated/safety";
export type { UserSettings } from "../generated/settings";
export type { TaskDocument } from "../generated/task";

/** The api's request and response bodies (schemas/openapi.json). */
export type Schemas = components["schemas"];

/** What the page's own server tells it (tools/web.py, /config.json). */
export interface Config {
  projectId: string;
  apiKey: string;
  authEmulator?: string;
  firestoreEmulator?: string;
  uploadsVia?: string;
  filesUrl?: string;
  testUser?: { email: string; password: string };
}

/** A new shared conversation: with one member (`#/to/{userId}`) or the family. */
export type Target = { targetUserId: string } | { targetFamily: true };

/** Where the user is in a question call's cards: the card shown, the answers given so
 * far (by card), and the options picked on a multi-select card. */
export interface QuestionState {
  readonly index: number;
  readonly answers: Readonly<Record<number, string | readonly string[]>>;
  readonly picked: readonly string[];
}

/** A file uploaded and waiting for the next send. */
export interface Attachment {
  storagePath: string;
  contentType: string;
  sizeBytes: number;
  name: string;
}
