// "Your data and account" (DESIGN §15): "Download my data" saves the api's zip of
// everything kept of the user; "Delete my account" asks for the typed confirmation
// ("delete my account"), then the api starts the erasure (202) and the page signs out,
// saying what happens next. `saveZip` and `exportRefusal` serve the family panel's
// parent too (a dependent's data).
import { signOut } from "firebase/auth";
import { ApiError } from "../api";
import { $, el } from "../dom";
import { session } from "../session";
import { confirmed } from "./dialog";

export const ERASE_PHRASE = "delete my account";

/** Saves `zip` as `name` through the browser's own download. */
export function saveZip(zip: Blob, name: string): void {
  const link = el("a", { href: URL.createObjectURL(zip) });
  link.download = name;
  link.click();
  // Long enough for the browser to have read it; the object URL then goes.
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

/** An export refused, in words: one per ten minutes is kept (429), so say when. */
export function exportRefusal(error: unknown): string {
  if (error instanceof ApiError && error.status === 429) {
    const minutes = Math.max(1, Math.ceil((error.retryAfter ?? 600) / 60));
    const when = minutes === 1 ? "in a minute" : `in about ${minutes} minutes`;
    return `A copy of this data was prepared a few minutes ago, so another cannot be made yet. Please try again ${when}.`;
  }
  return (error as Error).message;
}

const state = { busy: false };

function status(text: string): void {
  $("account-status").textContent = text;
}

async function download(): Promise<void> {
  if (state.busy) return;
  state.busy = true;
  status("Preparing your data…");
  try {
    const { api, auth } = session();
    saveZip(await api.exportData(), `spark-data-${auth.currentUser?.uid ?? "mine"}.zip`);
    status("Your data was downloaded as a zip. Its README.txt says what is in it.");
  } catch (error) {
    status(exportRefusal(error));
  } finally {
    state.busy = false;
  }
}

async function erase(): Promise<void> {
  if (state.busy) return;
  const yes = await confirmed({
    title: "Delete your account?",
    text:
      "Spark AI Agent will erase your conversations, lessons, tasks, files and settings, take you out of your family, and then remove your sign-in. " +
      "Messages you sent to family members stay in their copies, marked as from a deleted account. This cannot be undone; download your data first if you want a copy.",
    confirm: "Delete my account",
    typed: ERASE_PHRASE,
  });
  if (!yes) return;
  state.busy = true;
  status("Deleting your account…");
  try {
    const { api, auth } = session();
    await api.eraseAccount();
    // The erasure is under way on the server; this page has nothing more to show.
    $("signed-out-note").textContent =
      "Your account is being deleted. Spark AI Agent is erasing your conversations, lessons, tasks, files and settings, then your sign-in; " +
      "this takes a few minutes and needs nothing more from you. Messages you sent to family members stay in their copies, marked as from a deleted account.";
    status("");
    await signOut(auth);
  } catch (error) {
    // 409 last_parent: the api says what to do first (make someone else a parent).
    status((error as Error).message);
  } finally {
    state.busy = false;
  }
}

/** Wires the section's buttons once, at boot. */
export function wireAccount(): void {
  $("export-mine").addEventListener("click", download);
  $("delete-account").addEventListener("click", erase);
}
