// The Firestore listeners on the signed-in user's own documents, the page's only source
// of what it shows: the conversation list, the family mirror, settings and a parent's
// safety flags (until
// signing out), and the open conversation with its task sections and lesson (until
// another is opened). Each snapshot becomes an update of the state (store.ts).
import {
  type DocumentSnapshot,
  type FirestoreError,
  type Unsubscribe,
  collection,
  doc,
  getDoc,
  limit,
  onSnapshot,
  orderBy,
  query,
  where,
} from "firebase/firestore";
import { session } from "./session";
import { changed, state, update } from "./store";
import type { ArchiveSegment, Conversation, FamilyMirror, Lesson, SafetyMirror, TaskDocument, UserSettings } from "./types";
import { showLesson } from "./views/lesson";

// Each listener's stop: the open conversation's, and those kept until signing out.
const stops = { conversation: [] as Unsubscribe[], global: [] as Unsubscribe[] };

/** The document a snapshot holds, as its schema (schemas/) describes it. */
function read<T>(snapshot: DocumentSnapshot): T | null {
  return snapshot.exists() ? (snapshot.data() as T) : null;
}

const client = (...path: string[]): [string, ...string[]] => [state().user?.uid ?? "", "client", ...path];

/** Stops the open conversation's listeners, and with `all` the list's and the family's. */
export function stopListening(all: boolean): void {
  for (const stop of stops.conversation.splice(0)) stop();
  if (all) for (const stop of stops.global.splice(0)) stop();
}

/** Whether the open conversation is being listened to. */
export const listening = (): boolean => stops.conversation.length > 0;

// A listener the SDK ends with an error (permission denied when it starts in the moment
// after sign-in, before the user's token reaches Firestore) is started again a second
// later, until it is stopped (signing out stops it): otherwise the panel it feeds would
// stay as it was until the page is reloaded.
function watch(start: (failed: (error: FirestoreError) => void) => Unsubscribe): void {
  let stop: Unsubscribe = () => {};
  let retry: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const begin = () => {
    stop = start((error) => {
      console.warn(`A listener stopped (${error.code}); it starts again.`);
      if (!stopped) retry = setTimeout(begin, 1000);
    });
  };
  begin();
  stops.global.push(() => {
    stopped = true;
    clearTimeout(retry);
    stop();
  });
}

/** The conversation list, the family mirror and the settings, until signing out. */
export function listenToUser(): void {
  const { db, family } = session();
  const list = query(collection(db, ...client("conversations")), orderBy("lastMessageAt", "desc"), limit(30));
  watch((failed) =>
    onSnapshot(
      list,
      (snapshot) => update({ listed: snapshot.docs.map((d) => ({ id: d.id, data: d.data() as Conversation })) }),
      failed,
    ),
  );
  // The family panel and the titles of shared conversations follow the user's mirror.
  watch((failed) =>
    onSnapshot(
      doc(db, ...client("family", "current")),
      (snapshot) => {
        family.setFamily(read<FamilyMirror>(snapshot));
        changed();
      },
      failed,
    ),
  );
  watch((failed) =>
    onSnapshot(doc(db, ...client("settings", "current")), (snapshot) => family.setSettings(read<UserSettings>(snapshot)), failed),
  );
  // A parent's safety flags (DESIGN §16); anyone else has no such document.
  watch((failed) =>
    onSnapshot(doc(db, ...client("family", "safety")), (snapshot) => family.setSafety(read<SafetyMirror>(snapshot)), failed),
  );
}

/** The open conversation's document, its task sections and the lesson it works on. */
export function listenToConversation(conversationId: string): void {
  const { db } = session();
  let lessonFollowed: string | null = null;
  const followLesson = (conversation: Conversation | null) => {
    const id = conversation && conversation.documentId;
    if (!id || id === lessonFollowed) return;
    lessonFollowed = id;
    stops.conversation.push(onSnapshot(doc(db, ...client("lessons", id)), (snapshot) => showLesson(read<Lesson>(snapshot))));
  };
  stops.conversation.push(
    onSnapshot(doc(db, ...client("conversations", conversationId)), (snapshot) => {
      const conversation = read<Conversation>(snapshot);
      update({ conversation });
      followLesson(conversation);
    }),
  );
  const sections = query(collection(db, ...client("tasks")), where("conversationId", "==", conversationId));
  stops.conversation.push(
    onSnapshot(sections, (snapshot) => {
      const tasks = snapshot.docs.map((d) => d.data() as TaskDocument);
      update({ tasks: new Map(tasks.map((task) => [task.toolCallId, task])) });
    }),
  );
}

/** The next older archive segment of the open conversation, put before what is shown. */
export async function loadEarlier(): Promise<void> {
  const { conversation, conversationId, loadedSegments } = state();
  const archived = conversation && conversation.archived;
  if (!archived || !conversationId) return;
  const segment = archived.segments - loadedSegments;
  if (segment < 1) return;
  const ref = doc(session().db, ...client("conversations", conversationId, "archive", String(segment).padStart(6, "0")));
  const found = read<ArchiveSegment>(await getDoc(ref));
  const { earlier } = state();
  update({ loadedSegments: loadedSegments + 1, earlier: found ? [...found.messages, ...earlier] : earlier });
}
