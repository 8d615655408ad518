// Young learners (DESIGN §16), in the family panel: for a parent, the safety flags
// (read from their own mirror /{uid}/client/family/safety: who, when, what kind and
// which way; the words are never kept, so none can show) and, beside each dependent,
// the controls (consents, quiet hours, a daily limit) saved through
// `PUT .../members/{uid}/controls`. For a dependent, a send the controls refuse (403
// `parent_controls`) is said kindly, by its reason. A dependent never sees the flags.
import { ApiError, type Api, type ParentControls } from "../api";
import { $, el } from "../dom";
import type { FamilyMember, FamilyMirror, SafetyFlag, SafetyMirror } from "../types";

/** A flag's category in plain words (the moderator's, `shared/llm/moderation.py`). */
const CATEGORY: Record<string, string> = {
  self_harm: "self-harm",
  sexual: "sexual content",
  violence: "violence",
  hate: "hate",
  harassment: "harassment or bullying",
  illicit: "something illegal",
};

export function categoryWords(category: string): string {
  return CATEGORY[category] ?? category.replace(/_/g, " ");
}

/** What a dependent is told when the controls refuse their send, speech or
 * transcription; null for any other error. */
export function controlsRefusal(error: unknown): string | null {
  if (!(error instanceof ApiError) || error.status !== 403 || error.code !== "parent_controls") return null;
  switch (error.reason) {
    case "consent":
      return "A grown-up in your family has turned this off, so Spark AI Agent cannot do it for you. Ask them if you would like it back on.";
    case "quiet_hours":
      return "It is quiet time now, which a grown-up in your family has set. Spark AI Agent will be here again when quiet time ends.";
    case "daily_limit":
      return "You have reached today's limit, which a grown-up in your family has set. You can carry on tomorrow.";
    default:
      return "A grown-up in your family has set what Spark AI Agent can do for you, and this is not allowed just now.";
  }
}

const when = (ms: number) =>
  new Date(ms).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });

/** The parent's flags, newest first, each member named from the family's list. */
export function renderFlags(mirror: SafetyMirror | null, family: FamilyMirror | null): void {
  const parent = Boolean(family && family.myRole === "parent");
  $("safety").hidden = !parent;
  if (!parent || !family) {
    $("flag-list").replaceChildren();
    return;
  }
  const names = new Map((family.members || []).map((m) => [m.userId, m.displayName]));
  // Newest first, whatever order the mirror keeps.
  const ms = (flag: SafetyFlag) => (flag.at.seconds ?? 0) * 1000 + Math.floor((flag.at.nanoseconds ?? 0) / 1e6);
  const flags = [...((mirror && mirror.flags) || [])].sort((a, b) => ms(b) - ms(a));
  const items = flags.map((flag) => {
    const name = names.get(flag.memberId) ?? "A former family member";
    const what =
      flag.direction === "input"
        ? `Something ${name} wrote was stopped`
        : `A reply to ${name} was stopped`;
    return el(
      "li",
      { className: "flag" },
      el("strong", { text: name }),
      " ",
      el("span", { text: `${what}: ${categoryWords(flag.category)}.` }),
      " ",
      el("time", { datetime: new Date(ms(flag)).toISOString(), text: when(ms(flag)) }),
    );
  });
  $("flag-list").replaceChildren(...(items.length ? items : [el("li", { text: "Nothing has been stopped." })]));
}

/** The defaults for a dependent (DESIGN §16): every consent, no quiet hours, no limit. */
export const DEFAULT_CONTROLS: ParentControls = {
  consent: { chat: true, speech: true, transcription: true, moderation: true },
};

// Each consent lets one kind of outside service receive the dependent's words or voice
// (DESIGN §16): off, Spark AI Agent refuses what would need it.
const CONSENTS: readonly { key: keyof ParentControls["consent"]; label: string; hint: string }[] = [
  { key: "chat", label: "Chat with Spark AI Agent", hint: "Their messages go to the company whose AI model writes the replies." },
  { key: "speech", label: "Replies read aloud", hint: "A reply's words go to a speech service, which speaks them." },
  { key: "transcription", label: "Voice messages", hint: "Their recorded voice goes to a service that writes down what they said." },
  { key: "moderation", label: "Safety checks", hint: "Their messages and the replies go to a safety service, which spots harmful content." },
];

/** The browser's own time zone, the form's default. */
const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

function zones(): string[] {
  const known = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return [...new Set([browserZone(), "UTC", ...known])].sort();
}

/** The controls the page last saw saved, by dependent: the parent cannot read the
 * dependent's mirror, so the form shows the PUT's answer, or the defaults until then. */
const saved = new Map<string, ParentControls>();

/** The controls the api answered with, read defensively (the route is new): whatever
 * it lacks is taken from what was sent. */
function answered(answer: unknown, sent: ParentControls): ParentControls {
  const got = (answer && typeof answer === "object" && "controls" in answer ? (answer as { controls: unknown }).controls : null) as Partial<ParentControls> | null;
  if (!got || typeof got !== "object") return sent;
  const consent = { ...sent.consent };
  for (const { key } of CONSENTS) if (typeof got.consent?.[key] === "boolean") consent[key] = got.consent[key];
  const hours = got.quietHours;
  const quiet = hours && typeof hours.start === "string" && typeof hours.end === "string" ? hours : null;
  const turns = typeof got.dailyTurns === "number" ? got.dailyTurns : null;
  return { consent, ...(quiet ? { quietHours: quiet } : {}), ...(turns ? { dailyTurns: turns } : {}) };
}

/** Each dependent's disclosure, kept while the member list is built again (every change
 * to the family rebuilds it): a form being filled in stays open, as it was. */
const forms = new Map<string, HTMLDetailsElement>();

/** "Controls for {name}": a disclosure beside a dependent, with its form. */
export function controlsFor(api: Api, family: FamilyMirror, member: FamilyMember): HTMLDetailsElement {
  const key = `${family.familyId}:${member.userId}:${member.displayName}`;
  const kept = forms.get(key);
  if (kept) return kept;
  const made = buildControls(api, family, member);
  forms.set(key, made);
  return made;
}

function buildControls(api: Api, family: FamilyMirror, member: FamilyMember): HTMLDetailsElement {
  const name = member.displayName;
  const id = (part: string) => `controls-${member.userId}-${part}`;
  const shown = saved.get(member.userId) ?? DEFAULT_CONTROLS;
  const form = el("form", { className: "controls", novalidate: true, "aria-label": `Controls for ${name}` });
  const consents = el("fieldset", {}, el("legend", { text: `What ${name} may use` }));
  for (const { key, label, hint } of CONSENTS) {
    const box = el("input", { type: "checkbox", id: id(key), "aria-describedby": id(`${key}-hint`) });
    box.checked = shown.consent[key];
    consents.append(
      el("p", { className: "toggle" }, box, el("label", { for: id(key), text: label })),
      el("p", { className: "hint consent-hint", id: id(`${key}-hint`), text: hint }),
    );
  }
  const start = el("input", { type: "time", id: id("start"), value: shown.quietHours?.start ?? "" });
  const end = el("input", { type: "time", id: id("end"), value: shown.quietHours?.end ?? "" });
  const zone = el("select", { id: id("zone") });
  const chosen = shown.quietHours?.timeZone ?? browserZone();
  zone.append(...[...new Set([chosen, ...zones()])].map((z) => el("option", { value: z, text: z.replace(/_/g, " ") })));
  zone.value = chosen;
  const quiet = el(
    "fieldset",
    {},
    el("legend", { text: "Quiet hours" }),
    el("p", { className: "hint", text: `${name} cannot use Spark AI Agent between these times. Leave both empty for none.` }),
    el("label", { for: id("start"), text: "Quiet from" }),
    start,
    el("label", { for: id("end"), text: "Quiet until" }),
    end,
    el("label", { for: id("zone"), text: "Time zone" }),
    zone,
  );
  const turns = el("input", { type: "number", id: id("turns"), min: 1, max: 500, step: 1, inputmode: "numeric", "aria-describedby": id("turns-hint"), value: shown.dailyTurns ?? "" });
  const limit = el(
    "p",
    { className: "limit" },
    el("label", { for: id("turns"), text: "Messages a day" }),
    turns,
    el("span", { className: "hint", id: id("turns-hint"), text: "From 1 to 500; leave empty for no limit." }),
  );
  const status = el("p", { className: "status", role: "status", id: id("status") });
  const save = el("button", { type: "submit", text: `Save controls for ${name}` });
  form.append(consents, quiet, limit, save, status);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body: ParentControls = { consent: { ...DEFAULT_CONTROLS.consent } };
    for (const { key } of CONSENTS) body.consent[key] = $<HTMLInputElement>(id(key)).checked;
    if (start.value || end.value) {
      if (!start.value || !end.value) {
        status.textContent = "Quiet hours need both a start and an end time, or neither.";
        (start.value ? end : start).focus();
        return;
      }
      body.quietHours = { start: start.value, end: end.value, timeZone: zone.value };
    }
    const typed = turns.value.trim();
    if (typed) {
      const n = Number(typed);
      if (!Number.isInteger(n) || n < 1 || n > 500) {
        status.textContent = "The daily limit is a whole number from 1 to 500, or empty for no limit.";
        turns.setAttribute("aria-invalid", "true");
        turns.focus();
        return;
      }
      body.dailyTurns = n;
    }
    turns.removeAttribute("aria-invalid");
    save.disabled = true;
    status.textContent = "Saving…";
    try {
      const kept = answered(await api.setControls(family.familyId, member.userId, body), body);
      saved.set(member.userId, kept);
      status.textContent = `${name}'s controls are saved.`;
    } catch (error) {
      status.textContent = (error as Error).message; // the api's words, which say what to do
    } finally {
      save.disabled = false;
    }
  });
  return el("details", { className: "controls-for" }, el("summary", { text: `Controls for ${name}` }), form);
}

/** Forgets what was saved (signing out). */
export function forgetControls(): void {
  saved.clear();
  forms.clear();
}
