// What the page is connected to, made once at boot (main.ts): its server's settings, the
// Firebase Auth and Firestore clients, the api and the family panel.
import type { Auth } from "firebase/auth";
import type { Firestore } from "firebase/firestore";
import type { Api } from "./api";
import type { FamilyPanel } from "./views/family";
import type { Config } from "./types";

export interface Session {
  readonly config: Config;
  readonly auth: Auth;
  readonly db: Firestore;
  readonly api: Api;
  readonly family: FamilyPanel;
}

let made: Session | null = null;

/** Called once, by boot. */
export function begin(session: Session): void {
  made = session;
}

export function session(): Session {
  if (!made) throw new Error("The page has not booted.");
  return made;
}
