// The address is the page's route: `#/c/{id}` a conversation, `#/to/{userId}` a new one
// with a member, `#/family` a new one with the family, anything else a new conversation
// with the agent. A new shared conversation the list already holds opens that one.
import { listenToConversation, listening, stopListening } from "./listeners";
import { session } from "./session";
import { state, update } from "./store";
import type { Target } from "./types";
import { showLesson } from "./views/lesson";

const CONVERSATION = /^#\/c\/([A-Za-z0-9_-]{1,64})$/;
const MEMBER = /^#\/to\/([A-Za-z0-9_-]{1,128})$/;

export function route(): void {
  if (!state().user) return;
  const hash = location.hash;
  const match = CONVERSATION.exec(hash);
  const member = MEMBER.exec(hash);
  const target: Target | null = member && member[1] ? { targetUserId: member[1] } : hash === "#/family" ? { targetFamily: true } : null;
  if (target) {
    const listed = listedFor(target);
    if (listed) {
      location.replace(`#/c/${listed}`);
      return;
    }
  }
  open((match && match[1]) || null, target);
}

// The shared conversation already listed for a member or the family, if any: a message
// to them lands there anyway.
function listedFor(target: Target): string | null {
  const mirror = session().family.family;
  if (!mirror) return null;
  const found = state().listed.find(({ data }) =>
    data.familyId === mirror.familyId &&
    ("targetFamily" in target ? data.kind === "family" : data.kind === "direct" && (data.participantIds || []).includes(target.targetUserId)),
  );
  return found ? found.id : null;
}

function sameTarget(a: Target | null, b: Target | null): boolean {
  if (!a || !b) return a === b;
  return "targetFamily" in a ? "targetFamily" in b : "targetUserId" in b && a.targetUserId === b.targetUserId;
}

function open(conversationId: string | null, target: Target | null): void {
  const now = state();
  if (conversationId === now.conversationId && sameTarget(target, now.target) && listening()) return;
  stopListening(false);
  showLesson(null);
  update({ conversationId, target, conversation: null, earlier: [], loadedSegments: 0, tasks: new Map() });
  if (conversationId) listenToConversation(conversationId);
}
