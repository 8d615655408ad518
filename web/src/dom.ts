// The few DOM helpers every view shares: an element of the page by id, a new element
// with its attributes and children, and a button.

/** The page's element with this id (index.html has them all: a missing one is a bug). */
export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`The page has no element #${id}.`);
  return found as T;
}

export type Attributes = Record<string, string | number | boolean | null | undefined>;

/** A new `tag` element: `text` sets its text, `className` its class, any other key an
 * attribute (skipped when null, undefined or false; empty when true). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attributes = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "className") node.className = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  node.append(...children.filter((c): c is Node | string => c !== null && c !== undefined));
  return node;
}

export function button(label: string, onClick: () => void): HTMLButtonElement {
  const b = el("button", { type: "button", text: label });
  b.addEventListener("click", onClick);
  return b;
}
