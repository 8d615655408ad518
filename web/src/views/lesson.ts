// The lesson the open conversation works on, previewed from the lesson's XML with
// createElement only: known elements become their HTML counterparts, anything else its
// text. No markup from the document reaches innerHTML. Below it, its earlier versions,
// listed when asked for, each of which can be restored.
import { ApiError } from "../api";
import { $, button, el } from "../dom";
import { session } from "../session";
import type { Lesson, Schemas } from "../types";

const SAME = new Set(["h1", "h2", "h3", "p", "ul", "ol", "li", "strong", "em", "b", "i", "table", "tr", "td", "th"]);
const HEADINGS: Record<string, string> = { h1: "h3", h2: "h4", h3: "h5" };

function convert(node: Node): Node {
  if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.nodeValue ?? "");
  if (!(node instanceof Element)) return document.createTextNode("");
  const name = node.localName;
  let out: HTMLElement;
  if (SAME.has(name)) {
    out = document.createElement(HEADINGS[name] ?? name);
  } else if (name === "blank") {
    out = document.createElement("span");
    out.className = "blank";
    out.textContent = "_____";
    return out;
  } else if (name === "writing-area") {
    out = document.createElement("div");
    out.className = "writing-area";
    out.textContent = "(writing space)";
    return out;
  } else if (name === "note") {
    out = document.createElement("aside");
    out.className = "note";
  } else if (name === "exercise" || name === "section" || name === "lesson") {
    out = document.createElement("section");
    out.className = name;
  } else {
    out = document.createElement("span");
  }
  for (const child of node.childNodes) out.append(convert(child));
  return out;
}

/** The lesson `xml` as preview elements (its text only if it does not parse). */
export function lessonPreview(xml: string): Node {
  const parsed = new DOMParser().parseFromString(xml || "<lesson/>", "application/xml");
  if (parsed.getElementsByTagName("parsererror").length) {
    const pre = document.createElement("pre");
    pre.textContent = xml;
    return pre;
  }
  return convert(parsed.documentElement);
}

/** Shows `lesson` beside the conversation, or hides the panel (`null`). */
export function showLesson(lesson: Lesson | null): void {
  $("lesson").hidden = !lesson;
  if (!lesson) return;
  $("lesson-title").textContent = `Lesson: ${lesson.title}`;
  $("lesson-body").replaceChildren(lessonPreview(lesson.body));
  showVersions(lesson);
}

// ---- earlier versions -------------------------------------------------------------------

// The lesson shown (its id and version), and the disclosure its versions are listed in,
// made once and put below the preview.
const shown = { id: "", version: 0, panel: null as HTMLDetailsElement | null };

function versionsPanel(): HTMLDetailsElement {
  if (shown.panel) return shown.panel;
  const panel = el(
    "details",
    { id: "lesson-versions", className: "versions" },
    el("summary", { text: "Earlier versions" }),
    el("ul", { id: "lesson-version-list", "aria-label": "Earlier versions" }),
    el("p", { id: "lesson-version-status", className: "status", role: "status" }),
  );
  // Listed when opened: a list nobody looks at is never asked for.
  panel.addEventListener("toggle", () => {
    if (panel.open) void listVersions();
  });
  $("lesson").append(panel);
  shown.panel = panel;
  return panel;
}

function showVersions(lesson: Lesson): void {
  const panel = versionsPanel();
  const moved = lesson.id !== shown.id || lesson.version !== shown.version;
  const other = lesson.id !== shown.id;
  Object.assign(shown, { id: lesson.id, version: lesson.version });
  if (other) {
    panel.open = false;
    $("lesson-version-list").replaceChildren();
    $("lesson-version-status").textContent = "";
  } else if (moved && panel.open) {
    void listVersions();
  }
}

const when = new Intl.DateTimeFormat("en-GB", { dateStyle: "medium", timeStyle: "short" });

function versionItem(lessonId: string, kept: Schemas["KeptVersionInfo"]): HTMLLIElement {
  const saved = when.format(new Date(kept.savedAt));
  const label = `Version ${kept.version}: “${kept.title}”, saved ${saved}, ${kept.characters} characters`;
  const restore = button(`Restore version ${kept.version}`, () => void restoreVersion(lessonId, kept.version, restore));
  return el("li", { className: "version" }, el("span", { text: label }), " ", restore);
}

async function listVersions(): Promise<void> {
  const lessonId = shown.id;
  const status = $("lesson-version-status");
  try {
    const found = await session().api.lessonVersions(lessonId);
    if (lessonId !== shown.id) return;
    $("lesson-version-list").replaceChildren(...found.versions.map((kept) => versionItem(lessonId, kept)));
    const none = "No earlier versions are kept yet.";
    if (!found.versions.length) status.textContent = none;
    else if (status.textContent === none) status.textContent = "";
  } catch (error) {
    status.textContent = (error as Error).message;
  }
}

async function restoreVersion(lessonId: string, version: number, pressed: HTMLButtonElement): Promise<void> {
  const status = $("lesson-version-status");
  pressed.disabled = true;
  try {
    const done = await session().api.restoreLesson(lessonId, version);
    // The preview follows when the lesson's listener hears the new version.
    status.textContent = `Version ${done.restoredFrom} restored: it is version ${done.version} now.`;
  } catch (error) {
    pressed.disabled = false;
    const raced = error instanceof ApiError && error.status === 409;
    status.textContent = raced ? "The lesson changed meanwhile: look at the versions again." : (error as Error).message;
    if (raced) void listVersions();
  }
}
