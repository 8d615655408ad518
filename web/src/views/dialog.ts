// The page's one confirmation dialog (index.html's <dialog id="confirm">), for what
// cannot be undone: deleting a conversation, erasing an account. It is modal
// (`showModal`: the rest of the page is inert, Escape cancels), named by its heading and
// described by its text; "Cancel" comes first, so the focus starts on the safe choice.
// With `typed`, the person types the phrase before the dialog says yes: a wrong phrase
// is said in the dialog, which stays open. The focus goes back where it was.
import { $ } from "../dom";

export interface Confirmation {
  /** The dialog's heading: the question ("Delete “Tides”?"). */
  title: string;
  /** What happens, in words. */
  text: string;
  /** The button that does it ("Delete", "Delete my account"). */
  confirm: string;
  /** A phrase to type first, if any. */
  typed?: string;
}

let pending: ((yes: boolean) => void) | null = null;

/** Asks; true once the person confirms, false if they cancel (or press Escape). */
export function confirmed(ask: Confirmation): Promise<boolean> {
  const dialog = $<HTMLDialogElement>("confirm");
  const field = $<HTMLInputElement>("confirm-typed");
  const before = document.activeElement as HTMLElement | null;
  if (pending) pending(false);
  $("confirm-title").textContent = ask.title;
  $("confirm-text").textContent = ask.text;
  $("confirm-yes").textContent = ask.confirm;
  $("confirm-error").textContent = "";
  $("confirm-typing").hidden = !ask.typed;
  $("confirm-typed-label").textContent = ask.typed ? `Type “${ask.typed}” to confirm` : "";
  field.value = "";
  field.removeAttribute("aria-invalid");
  dialog.dataset.typed = ask.typed ?? "";
  dialog.showModal();
  if (ask.typed) field.focus();
  else $("confirm-no").focus();
  return new Promise((resolve) => {
    pending = (yes) => {
      pending = null;
      if (dialog.open) dialog.close();
      if (before && before.isConnected) before.focus();
      resolve(yes);
    };
  });
}

/** Wires the dialog's buttons once, at boot. */
export function wireDialog(): void {
  const dialog = $<HTMLDialogElement>("confirm");
  const field = $<HTMLInputElement>("confirm-typed");
  $("confirm-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const typed = dialog.dataset.typed ?? "";
    if (typed && field.value.trim().toLowerCase() !== typed) {
      field.setAttribute("aria-invalid", "true");
      $("confirm-error").textContent = `Type “${typed}” exactly, or choose Cancel.`;
      field.focus();
      return;
    }
    pending?.(true);
  });
  $("confirm-no").addEventListener("click", () => pending?.(false));
  // Escape: the browser closes the dialog; the question is answered no.
  dialog.addEventListener("close", () => pending?.(false));
}
