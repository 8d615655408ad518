// The family panel (DESIGN §8, §12), rendered only from the signed-in user's own
// documents: the mirror /{uid}/client/family/current (name, their role, the members)
// and /{uid}/client/settings/current (the opt-out). The api is called only to act:
// create a family, make an invite link, join with one (`/join?token=…`), change a
// member's role, revoke an invite, change one's own name, remove a member, leave,
// change the setting, and (a parent, for a dependent) export or erase their data or set
// their controls; a parent also sees the safety flags (views/safety.ts). A parent's list of invites is the one thing no mirror holds: it
// is read from the api when the panel first shows the family, and after each change
// to the invites. The panel keeps its own state (the mirror, the
// settings, a join token, whether an action is under way); the rest of the page reads
// the mirror through `family`.
import { $, el } from "../dom";
import type { Api } from "../api";
import { ERASE_PHRASE, exportRefusal, saveZip } from "./account";
import { confirmed } from "./dialog";
import { controlsFor, forgetControls, renderFlags } from "./safety";
import type { Conversation, FamilyMember, FamilyMirror, SafetyMirror, Schemas, UserSettings } from "../types";

type InviteInfo = Schemas["InviteInfo"];

/** How a shared conversation is titled: a `direct` one by the other member, a
 * `family` one by the family's name; `null` for an agent conversation. `names`
 * (userId → displayName, from messages the page has read) names a former member. */
export function sharedTitle(
  conversation: Conversation | null,
  family: FamilyMirror | null,
  uid: string,
  names: Map<string, string> = new Map(),
): string | null {
  if (!conversation || (conversation.kind !== "direct" && conversation.kind !== "family")) return null;
  const current = family && family.familyId === conversation.familyId ? family : null;
  if (conversation.kind === "family") return current ? current.name : "Your former family";
  const other = (conversation.participantIds || []).find((id) => id !== uid);
  const member = current && (current.members || []).find((m) => m.userId === other);
  if (member) return member.displayName;
  // A member who has left is still named by what they wrote.
  const theirs = (conversation.messages || []).find((m) => m.author && m.author.userId === other);
  if (theirs && theirs.author) return theirs.author.displayName ?? null;
  return (other && names.get(other)) || "A former family member";
}

/** userId → displayName of every author of the given conversations' messages. */
export function authorNames(conversations: readonly Conversation[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const conversation of conversations) {
    for (const message of conversation.messages || []) {
      if (message.author && message.author.userId) names.set(message.author.userId, message.author.displayName ?? "");
    }
  }
  return names;
}

const ROLE: Record<string, string> = { parent: "parent", dependent: "dependent" };

export interface FamilyDeps {
  api: Api;
  /** The signed-in user's id. */
  uid: () => string;
  /** Shows a conversation with a member (`#/to/{userId}`) or the family (`#/family`). */
  open: (hash: string) => void;
}

interface PanelState {
  family: FamilyMirror | null;
  settings: UserSettings | null;
  /** A parent's safety flags (their mirror); null for anyone else. */
  safety: SafetyMirror | null;
  token: string | null;
  busy: boolean;
  known: boolean;
  /** The parent's invites, and the family they were read for. */
  invites: readonly InviteInfo[];
  invitesOf: string;
  /** The last action's refusal, for a caller that says it in its own words. */
  refused: unknown;
}

/** The panel's behaviour. */
export function makeFamilyPanel(deps: FamilyDeps) {
  const { api } = deps;
  // known: the family mirror's first snapshot has come. Until then nobody can tell whether
  // the user is in a family, so the panel offers neither a new family nor the join: made
  // at once after sign-in, a family could be written while the listener was still being
  // set up, and that listener never heard of it (the web test's one flake, twice).
  const panel: PanelState = { family: null, settings: null, safety: null, token: null, busy: false, known: false, invites: [], invitesOf: "", refused: null };

  function status(text: string): void {
    $("family-status").textContent = text;
  }

  /** Runs one action at a time; false if it did not happen (the reason is shown). */
  async function act<T>(work: () => Promise<T>, done: string | ((answer: T) => string)): Promise<boolean> {
    if (panel.busy) return false;
    panel.busy = true;
    panel.refused = null;
    status("");
    try {
      const answer = await work();
      status(typeof done === "function" ? done(answer) : done);
      return true;
    } catch (error) {
      panel.refused = error;
      status((error as Error).message); // what the api said, which says what to do
      return false;
    } finally {
      panel.busy = false;
    }
  }

  function memberItem(member: FamilyMember, family: FamilyMirror, uid: string): HTMLLIElement {
    const mine = member.userId === uid;
    const item = el("li", { className: "member" });
    item.append(
      el("span", { className: "member-name", text: mine ? `${member.displayName} (you)` : member.displayName }),
      el("span", { className: "role", text: ` ${ROLE[member.role] || member.role}` }),
    );
    if (!mine) {
      const write = el("button", { type: "button", className: "link", text: `Message ${member.displayName}` });
      write.addEventListener("click", () => deps.open(`#/to/${member.userId}`));
      item.append(write);
      if (family.myRole === "parent") {
        const role = member.role === "parent" ? "dependent" : "parent";
        const change = el("button", { type: "button", className: "quiet", text: `Make ${member.displayName} a ${role}` });
        change.addEventListener("click", () => {
          act(() => api.setRole(family.familyId, member.userId, role), `${member.displayName} is now a ${role}.`);
        });
        item.append(change);
        const remove = el("button", { type: "button", className: "danger", text: `Remove ${member.displayName}` });
        remove.addEventListener("click", () => {
          if (!window.confirm(`Remove ${member.displayName} from ${family.name}?`)) return;
          act(() => api.removeMember(family.familyId, member.userId), `${member.displayName} was removed.`);
        });
        item.append(remove);
        if (member.role === "dependent") {
          const whose = { familyId: family.familyId, userId: member.userId };
          const save = el("button", { type: "button", className: "quiet", text: `Download ${member.displayName}'s data` });
          save.addEventListener("click", () => download(whose, member.displayName));
          const erase = el("button", { type: "button", className: "danger", text: `Delete ${member.displayName}'s account` });
          erase.addEventListener("click", () => eraseDependent(whose, member.displayName, family.name));
          item.append(save, erase, controlsFor(api, family, member));
        }
      }
    }
    return item;
  }

  /** A dependent's data saved as a zip; a refusal (one export per ten minutes) says
   * when to try again. */
  function download(member: { familyId: string; userId: string }, name: string): void {
    void act(
      async () => {
        status(`Preparing ${name}'s data…`);
        saveZip(await api.exportData(member), `spark-data-${member.userId}.zip`);
      },
      `${name}'s data was downloaded as a zip.`,
    ).then((done) => {
      if (!done && panel.refused) status(exportRefusal(panel.refused));
    });
  }

  /** A dependent's account erased, once the parent has typed the confirmation: the
   * erasure runs as a task, and the member list follows from the mirror. */
  async function eraseDependent(member: { familyId: string; userId: string }, name: string, familyName: string): Promise<void> {
    const yes = await confirmed({
      title: `Delete ${name}'s account?`,
      text:
        `Spark AI Agent will erase ${name}'s conversations, lessons, tasks, files and settings, take them out of ${familyName}, and then remove their sign-in. ` +
        `Messages ${name} sent to the family stay in the others' copies, marked as from a deleted account. This cannot be undone; download ${name}'s data first if you want a copy.`,
      confirm: `Delete ${name}'s account`,
      typed: ERASE_PHRASE,
    });
    if (!yes) return;
    await act(() => api.eraseAccount(member), `${name}'s account is being deleted: it takes a few minutes, and they leave the family list when it is done.`);
  }

  function render() {
    const family = panel.family;
    const uid = deps.uid();
    $("join").hidden = !panel.known || !panel.token;
    $("family-create").hidden = !panel.known || Boolean(family) || Boolean(panel.token);
    $("family-view").hidden = !family;
    const reads = !panel.settings || panel.settings.aiReadsFamilyMessages !== false;
    $<HTMLInputElement>("ai-reads").checked = reads;
    renderFlags(panel.safety, family);
    if (!family) {
      $("family-title").textContent = "Family";
      return;
    }
    $("family-title").textContent = `Family: ${family.name}`;
    $("family-summary").textContent = `You are ${family.myRole === "parent" ? "a parent" : "a dependent"} in ${family.name}.`;
    // Built again when the mirror changes: every change to the family rewrites it, with
    // its updatedAt.
    const version = `${family.familyId}:${family.updatedAt.seconds}.${family.updatedAt.nanoseconds}:${uid}`;
    const list = $("member-list");
    if (list.dataset.version !== version) {
      list.dataset.version = version;
      list.replaceChildren(...(family.members || []).map((m) => memberItem(m, family, uid)));
    }
    $("invite-form").hidden = family.myRole !== "parent";
    $("family-chat").hidden = (family.members || []).length < 2;
    const me = (family.members || []).find((m) => m.userId === uid);
    const name = $<HTMLInputElement>("rename-name");
    if (me && name.dataset.version !== version) {
      name.dataset.version = version;
      name.value = me.displayName;
    }
    $("invites").hidden = family.myRole !== "parent";
    if (family.myRole === "parent" && panel.invitesOf !== family.familyId) {
      panel.invitesOf = family.familyId;
      loadInvites(family.familyId);
    }
  }

  async function loadInvites(familyId: string): Promise<void> {
    try {
      panel.invites = (await api.invites(familyId)).invites;
    } catch (error) {
      panel.invites = [];
      status((error as Error).message);
    }
    renderInvites();
  }

  // Newest first, as the api lists them; only an active one can be revoked.
  function renderInvites(): void {
    const family = panel.family;
    const shown = family && family.familyId === panel.invitesOf ? panel.invites : [];
    const when = (iso: string) => new Date(iso).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });
    const items = shown.map((invite, n) => {
      const uses = `used ${invite.uses} of ${invite.maxUses}`;
      const state = invite.status === "active" ? `until ${when(invite.expiresAt)}` : invite.status.replace("_", " ");
      const item = el("li", { className: "invite-item" }, el("span", { text: `As a ${invite.role}, ${uses}, ${state}` }));
      if (invite.status === "active" && family) {
        const revoke = el("button", { type: "button", className: "danger", text: "Revoke", "aria-label": `Revoke invite ${n + 1} (as a ${invite.role})` });
        revoke.addEventListener("click", async () => {
          if (await act(() => api.revokeInvite(family.familyId, invite.id), "The invite link no longer works.")) {
            await loadInvites(family.familyId);
          }
        });
        item.append(revoke);
      }
      return item;
    });
    $("invite-list").replaceChildren(...(items.length ? items : [el("li", { text: "No invites yet." })]));
  }

  async function rename(event: Event): Promise<void> {
    event.preventDefault();
    const family = panel.family;
    const name = $<HTMLInputElement>("rename-name").value.trim();
    if (!family) return;
    if (!name) {
      status("Choose a name the family will see.");
      $("rename-name").focus();
      return;
    }
    await act(() => api.rename(family.familyId, deps.uid(), name), `The family now sees you as ${name}.`);
  }

  async function create(event: Event): Promise<void> {
    event.preventDefault();
    const name = $<HTMLInputElement>("family-name").value.trim();
    if (!name) {
      status("Give the family a name.");
      $("family-name").focus();
      return;
    }
    await act(() => api.createFamily(name, $<HTMLInputElement>("family-my-name").value.trim()), `${name} is created: you are its parent.`);
  }

  async function invite(event: Event): Promise<void> {
    event.preventDefault();
    const family = panel.family;
    if (!family) return;
    // The select's options are the roles the api knows.
    const role = $<HTMLSelectElement>("invite-role").value as Schemas["InviteRequest"]["role"];
    await act(async () => {
      const made = await api.invite(family.familyId, role);
      const link = $<HTMLInputElement>("invite-link");
      link.value = made.link;
      $("invite-made").hidden = false;
      loadInvites(family.familyId);
      const hours = Math.round((Date.parse(made.invite.expiresAt) - Date.now()) / 3_600_000);
      const uses = made.invite.maxUses === 1 ? "once" : `${made.invite.maxUses} times`;
      $("invite-note").textContent = `It lets someone join as a ${role}; it works ${uses}, for ${hours} hours. Only this page shows it: copy it now.`;
      link.focus();
      link.select();
    }, "Invite link made.");
  }

  async function join(event: Event): Promise<void> {
    event.preventDefault();
    const token = panel.token;
    if (!token) return;
    await act(async () => {
      const answer = await api.join(token, $<HTMLInputElement>("join-name").value.trim());
      forgetToken();
      return answer;
    }, (answer) => `You joined ${answer.family.name}.`);
  }

  function forgetToken(): void {
    panel.token = null;
    // The token leaves the address bar (and the history) once used or declined.
    history.replaceState(null, "", `/${location.hash}`);
    render();
  }

  async function leave(): Promise<void> {
    const family = panel.family;
    if (!family || !window.confirm(`Leave ${family.name}? You keep your messages; nothing more reaches you.`)) return;
    await act(() => api.removeMember(family.familyId, deps.uid()), `You left ${family.name}.`);
  }

  async function toggle(event: Event): Promise<void> {
    const wanted = (event.target as HTMLInputElement).checked;
    const said = wanted ? "Spark AI Agent may read your family messages." : "Spark AI Agent will not read your family messages.";
    // Done, the mirror's snapshot confirms it; refused, the box shows the stored setting again.
    if (!(await act(() => api.settings(wanted), said))) render();
  }

  $("family-create").addEventListener("submit", create);
  $("invite-form").addEventListener("submit", invite);
  $("rename").addEventListener("submit", rename);
  $("join").addEventListener("submit", join);
  $("join-cancel").addEventListener("click", () => { forgetToken(); status(""); });
  $("leave").addEventListener("click", leave);
  $("family-chat").addEventListener("click", () => deps.open("#/family"));
  $("ai-reads").addEventListener("change", toggle);

  // `/join?token=…`: kept until the signed-in user joins or declines.
  const token = new URLSearchParams(location.search).get("token");
  if (location.pathname === "/join" && token) panel.token = token;

  return {
    get family() { return panel.family; },
    setFamily(family: FamilyMirror | null) { panel.family = family; panel.known = true; render(); },
    setSettings(settings: UserSettings | null) { panel.settings = settings; render(); },
    setSafety(safety: SafetyMirror | null) { panel.safety = safety; renderFlags(safety, panel.family); },
    reset() {
      panel.family = panel.settings = panel.safety = null;
      forgetControls();
      panel.known = false;
      panel.invites = [];
      panel.invitesOf = "";
      $("invite-made").hidden = true;
      $<HTMLInputElement>("invite-link").value = "";
      status("");
      render();
    },
  };
}

export type FamilyPanel = ReturnType<typeof makeFamilyPanel>;
