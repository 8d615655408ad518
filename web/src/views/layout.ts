// On a phone the page is one column, one pane at a time: the conversation list, the
// chat, or the side panels (family, editor, lesson), each one tap away in the bar under
// the heading (app.css shows the bar and hides the other panes below 48rem only; on a
// wider screen all three show and the bar is hidden). Opening a conversation, from the
// list or the family panel, shows the chat.
import { $ } from "../dom";

type Pane = "conversations" | "chat" | "side";
const PANES: readonly Pane[] = ["conversations", "chat", "side"];

function show(pane: Pane): void {
  $("app-view").dataset.pane = pane;
  for (const name of PANES) $(`show-${name}`).setAttribute("aria-pressed", String(name === pane));
}

/** Wires the bar's buttons; the chat is shown first. */
export function wirePanes(): void {
  for (const name of PANES) $(`show-${name}`).addEventListener("click", () => show(name));
  window.addEventListener("hashchange", () => show("chat"));
  // The open conversation's own link changes no address: the chat is shown all the same.
  $("conversation-list").parentElement?.addEventListener("click", (event) => {
    if (event.target instanceof Element && event.target.closest("a")) show("chat");
  });
  show("chat");
}
