// Model and member text as sanitised Markdown: marked turns it into HTML, DOMPurify
// keeps only harmless elements and attributes (no script, no event handler, no
// javascript: URL, no style), and every link opens apart, without a referrer.
import DOMPurify from "dompurify";
import { marked } from "marked";

marked.setOptions({ gfm: true, breaks: true });

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  // An image written as HTML with no description gets an empty one: a screen reader
  // passes over it instead of reading out its address (axe: image-alt). A Markdown
  // image keeps the description it was written with.
  if (node.tagName === "IMG" && !node.hasAttribute("alt")) node.setAttribute("alt", "");
});

const OPTIONS = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe"],
  FORBID_ATTR: ["style", "id", "class"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true as const,
};

/** A fragment holding `text` rendered as sanitised Markdown. */
export function markdown(text: string | null | undefined): DocumentFragment {
  const html = marked.parse(text || "", { async: false });
  return purifier.sanitize(html, OPTIONS);
}
