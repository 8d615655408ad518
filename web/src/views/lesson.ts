// The lesson the open conversation works on, previewed from the lesson's XML with
// createElement only: known elements become their HTML counterparts, anything else its
// text. No markup from the document reaches innerHTML.
import { $ } from "../dom";
import type { Lesson } from "../types";

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
}
