// The conversation list, newest first, the open one marked; beside each, "Rename" (a
// conversation with the agent: a title of one's own, which no automatic title replaces)
// and "Delete" (asked first, in the page's dialog; a shared conversation loses only the
// user's own copy). The list itself follows from Firestore: a renamed title or a deleted
// conversation shows when the listener hears it.
import { route } from "../router";
import { $, el } from "../dom";
import { session } from "../session";
import { type Listed, state } from "../store";
import type { FamilyMirror } from "../types";
import { confirmed } from "./dialog";
import { authorNames, sharedTitle } from "./family";

// What the list was last built from (the snapshots' own objects: a new one each time
// a listener hears a change), and the conversation being renamed, if any.
const built = { listed: null as readonly Listed[] | null, family: null as FamilyMirror | null, uid: "", editing: "" };
const editing = { id: "", busy: false };

function listLabel({ data }: Listed, names: Map<string, string>): string {
  const uid = state().user?.uid ?? "";
  const title = sharedTitle(data, session().family.family, uid, names);
  if (title) return title;
  const first = (data.messages || []).find((m) => m.role === "user");
  return data.title || (first && first.content.map((p) => p.text || "").join("").slice(0, 60)) || "Conversation";
}

function status(text: string): void {
  $("list-status").textContent = text;
}

/** The link that opens `entry`. */
function link(entry: Listed, names: Map<string, string>): HTMLAnchorElement {
  const made = el("a", { href: `#/c/${entry.id}`, "data-key": `open:${entry.id}` });
  const kind = entry.data.kind;
  if (kind === "direct" || kind === "family") {
    const label = listLabel(entry, names);
    const what = kind === "direct" ? "direct messages" : "family messages";
    made.className = `shared ${kind}`;
    // Seen as a badge, heard as part of the name: "Dad, direct messages".
    made.setAttribute("aria-label", `${label}, ${what}`);
    made.append(document.createTextNode(label), el("span", { className: "kind", text: kind }));
  } else {
    made.textContent = listLabel(entry, names);
  }
  return made;
}

/** A button named by its action alone ("Rename", "Delete"), described by the
 * conversation's link (`of`): a screen reader says which conversation, and a name
 * never holds a conversation's words (a title such as "Stop" would otherwise make two
 * buttons answer to one name). */
function iconButton(glyph: string, action: string, of: string, label: string, key: string, onClick: () => void, className = "icon"): HTMLButtonElement {
  const made = el("button", { type: "button", className, "aria-label": action, "aria-describedby": of, title: `${action} “${label}”`, "data-key": key, text: glyph });
  made.addEventListener("click", onClick);
  return made;
}

function item(entry: Listed, names: Map<string, string>): HTMLLIElement {
  const label = listLabel(entry, names);
  const agent = !entry.data.kind || entry.data.kind === "agent";
  if (agent && editing.id === entry.id) return renameForm(entry, label);
  const actions = el("span", { className: "list-actions" });
  const opens = link(entry, names);
  opens.id = `listed-${entry.id}`;
  if (agent) actions.append(iconButton("✎", "Rename", opens.id, label, `rename:${entry.id}`, () => startRename(entry.id)));
  actions.append(iconButton("✕", "Delete", opens.id, label, `delete:${entry.id}`, () => remove(entry, label), "icon danger"));
  return el("li", { className: "listed" }, opens, actions);
}

function renameForm(entry: Listed, label: string): HTMLLIElement {
  const field = el("input", { id: `title-${entry.id}`, value: entry.data.title || label, maxlength: 120, autocomplete: "off", "data-key": `title:${entry.id}` });
  const form = el(
    "form",
    { className: "rename-conversation", novalidate: true, "aria-label": `Rename “${label}”` },
    el("label", { for: field.id, text: "New title" }),
    field,
  );
  const cancel = el("button", { type: "button", className: "quiet", text: "Cancel" });
  cancel.addEventListener("click", () => stopRename(entry.id));
  form.append(el("span", { className: "actions" }, el("button", { type: "submit", text: "Save" }), cancel));
  field.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      stopRename(entry.id);
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void rename(entry.id, field.value.trim());
  });
  return el("li", { className: "listed editing" }, form);
}

function startRename(id: string): void {
  editing.id = id;
  status("");
  renderList();
  const field = document.getElementById(`title-${id}`) as HTMLInputElement | null;
  field?.focus();
  field?.select();
}

function stopRename(id: string): void {
  editing.id = "";
  renderList();
  focusKey(`rename:${id}`);
}

async function rename(id: string, title: string): Promise<void> {
  if (!title) {
    status("A title needs at least one character.");
    return;
  }
  if (editing.busy) return;
  editing.busy = true;
  try {
    await session().api.renameConversation(id, title);
    status(`Renamed “${title}”.`);
    stopRename(id);
  } catch (error) {
    status((error as Error).message);
  } finally {
    editing.busy = false;
  }
}

async function remove(entry: Listed, label: string): Promise<void> {
  const agent = !entry.data.kind || entry.data.kind === "agent";
  const yes = await confirmed({
    title: `Delete “${label}”?`,
    text: agent
      ? "Its messages, the files sent in it and its tasks' sections are deleted for good, and a reply still being written stops. Lessons it made stay. This cannot be undone."
      : "Your copy of these messages is deleted for good; the others keep theirs. This cannot be undone.",
    confirm: "Delete",
  });
  if (!yes) return;
  // The focus goes to the next conversation (or the one before), else "New
  // conversation": chosen now, as the listener may take this one out before the api answers.
  const links = [...$("conversation-list").querySelectorAll<HTMLElement>("a")];
  const at = links.findIndex((a) => a.dataset.key === `open:${entry.id}`);
  const next = (at >= 0 && (links[at + 1] || links[at - 1])) || null;
  const nextKey = next ? next.dataset.key : undefined;
  try {
    await session().api.deleteConversation(entry.id);
    status(`Deleted “${label}”.`);
    const target = nextKey ? $("conversation-list").querySelector<HTMLElement>(`[data-key="${CSS.escape(nextKey)}"]`) : null;
    (target || $("new-conversation")).focus();
    if (state().conversationId === entry.id) {
      // A new conversation, without the hash change that would show the chat on a phone:
      // the person is in the list.
      history.replaceState(null, "", "#/");
      route();
    }
  } catch (error) {
    status((error as Error).message);
  }
}

/** Focuses the list's element with `key`, if it has one. */
function focusKey(key: string): void {
  $("conversation-list").querySelector<HTMLElement>(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

/** The conversation list, newest first, the open one marked. */
export function renderList(): void {
  const { listed, user, conversationId } = state();
  const family = session().family.family;
  const uid = user?.uid ?? "";
  const list = $("conversation-list");
  if (built.listed !== listed || built.family !== family || built.uid !== uid || built.editing !== editing.id) {
    if (editing.id && !listed.some((entry) => entry.id === editing.id)) editing.id = "";
    Object.assign(built, { listed, family, uid, editing: editing.id });
    // A snapshot rebuilds the list: the focus stays on the same control, by its key.
    const active = document.activeElement;
    const key = active instanceof HTMLElement && list.contains(active) ? active.dataset.key : undefined;
    const typed = active instanceof HTMLInputElement && list.contains(active) ? active.value : null;
    const names = authorNames(listed.map((entry) => entry.data));
    list.replaceChildren(...listed.map((entry) => item(entry, names)));
    if (key) {
      focusKey(key);
      const again = document.activeElement;
      if (typed !== null && again instanceof HTMLInputElement) again.value = typed;
    }
  }
  for (const a of list.querySelectorAll("a")) {
    if (a.getAttribute("href") === `#/c/${conversationId}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}
