// Spark AI Agent's reference web client (DESIGN §12). It renders a conversation only
// from Firestore listeners on the signed-in user's own documents (`messages`, then
// `activeRun.message`, then the messages queued behind it) and calls the api only to
// act. A reload or a second tab shows the same thing because there is nothing else.
//
// Its parts: store.ts (the state, in one place), listeners.ts (Firestore → the state),
// router.ts (the address → the open conversation), views/ (the state → the page),
// composer.ts, voice.ts and actions.ts (the user → the api), and this file, which connects them.
import { initializeApp } from "firebase/app";
import {
  connectAuthEmulator,
  createUserWithEmailAndPassword,
  getAuth,
  onAuthStateChanged,
  signInWithEmailAndPassword,
  signOut,
} from "firebase/auth";
import { connectFirestoreEmulator, getFirestore } from "firebase/firestore";
import { carryOutClientTools, stop } from "./actions";
import { makeApi } from "./api";
import { attach, loadModel, renderAttached, renderExamples, send } from "./composer";
import { $ } from "./dom";
import { listenToUser, loadEarlier, stopListening } from "./listeners";
import { route } from "./router";
import { begin, session } from "./session";
import { onUpdate, state, update } from "./store";
import type { Config } from "./types";
import { wireAccount } from "./views/account";
import { wireDialog } from "./views/dialog";
import { makeFamilyPanel } from "./views/family";
import { renderMessages } from "./views/messages";
import { renderList } from "./views/list";
import { renderApprovals, renderHeading, renderRun } from "./views/panels";
import { wirePanes } from "./views/layout";
import { renderReadAloud, renderTalk, talk } from "./voice";

async function boot(): Promise<void> {
  const config = (await (await fetch("/config.json")).json()) as Config;
  const app = initializeApp({ apiKey: config.apiKey, projectId: config.projectId, authDomain: "localhost" });
  const auth = getAuth(app);
  const db = getFirestore(app);
  if (config.authEmulator) connectAuthEmulator(auth, config.authEmulator, { disableWarnings: true });
  if (config.firestoreEmulator) {
    const [host = "", port] = config.firestoreEmulator.split(":");
    connectFirestoreEmulator(db, host, Number(port));
  }
  const api = makeApi(() => (auth.currentUser ? auth.currentUser.getIdToken() : Promise.reject(new Error("Sign in first."))));
  const family = makeFamilyPanel({
    api,
    uid: () => state().user?.uid ?? "",
    open: (hash) => { location.hash = hash; },
  });
  begin({ config, auth, db, api, family });
  if (config.testUser) {
    $("sign-in-hint").textContent = `Local test user: ${config.testUser.email}, password ${config.testUser.password} (or any e-mail and password: the Auth emulator signs you up).`;
  }
  onUpdate(render);
  onUpdate(carryOutClientTools);
  wire();
  onAuthStateChanged(auth, (user) => {
    $("sign-in-view").hidden = Boolean(user);
    $("app-view").hidden = !user;
    $("who").hidden = $("sign-out").hidden = !user;
    stopListening(true);
    update({ user, listed: [] });
    family.reset();
    if (user) {
      $("signed-out-note").textContent = "";
      $("who").textContent = `Signed in as ${user.email}`;
      loadModel();
      listenToUser();
      route();
    } else {
      $("email").focus();
    }
  });
}

function render(): void {
  if (!state().user) return;
  renderList();
  renderMessages();
  renderHeading();
  renderExamples();
  renderRun();
  renderApprovals();
  renderAttached();
  renderTalk();
  renderReadAloud();
}

async function signIn(event: Event): Promise<void> {
  event.preventDefault();
  const { auth, config } = session();
  const email = $<HTMLInputElement>("email").value.trim();
  const password = $<HTMLInputElement>("password").value;
  const said = $("sign-in-error");
  said.textContent = "";
  try {
    await signInWithEmailAndPassword(auth, email, password);
  } catch (error) {
    const code = (error as { code?: string }).code ?? "";
    const unknown = ["auth/user-not-found", "auth/invalid-credential", "auth/invalid-login-credentials"];
    if (config.authEmulator && unknown.includes(code)) {
      try {
        await createUserWithEmailAndPassword(auth, email, password);
        return;
      } catch (second) {
        const again = second as { code?: string; message: string };
        said.textContent = again.code === "auth/email-already-in-use" ? "Wrong email or password." : again.message;
        return;
      }
    }
    said.textContent = code === "auth/invalid-email" ? "That is not an e-mail address." : "Wrong email or password.";
  }
}

function wire(): void {
  $("sign-in").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(session().auth));
  $("composer").addEventListener("submit", send);
  $("composer-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $<HTMLFormElement>("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stop);
  $("earlier").addEventListener("click", loadEarlier);
  $("attach").addEventListener("change", attach);
  window.addEventListener("hashchange", route);
  $("talk").addEventListener("click", talk);
  wirePanes();
  wireDialog();
  wireAccount();
}

boot();
