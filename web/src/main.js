// Spark AI Agent's reference web client (DESIGN §12). It renders a conversation only
// from Firestore listeners on the signed-in user's own documents (`messages`, then
// `activeRun.message`, then the messages queued behind it) and calls the api only to
// act. A reload or a second tab shows the same thing because there is nothing else.
import { initializeApp } from "firebase/app";
import {
  connectAuthEmulator,
  createUserWithEmailAndPassword,
  getAuth,
  onAuthStateChanged,
  signInWithEmailAndPassword,
  signOut,
} from "firebase/auth";
import {
  collection,
  connectFirestoreEmulator,
  doc,
  getDoc,
  getFirestore,
  limit,
  onSnapshot,
  orderBy,
  query,
  where,
} from "firebase/firestore";
import { makeApi } from "./api.js";
import { authorNames, makeFamilyPanel, sharedTitle } from "./family.js";
import { lessonPreview } from "./lesson.js";
import { renderMessage } from "./render.js";

const $ = (id) => document.getElementById(id);

const state = {
  user: null,
  conversationId: null,
  conversation: null,
  target: null, // a new shared conversation: {targetUserId} or {targetFamily: true}
  listed: [], // the conversation list's documents, newest first
  delivery: null, // {fingerprint, key}: the Idempotency-Key of a message to members until it is sent
  earlier: [], // messages read from the archive, oldest first
  loadedSegments: 0,
  tasks: new Map(), // toolCallId → task section document
  expanded: new Set(), // message ids whose "Done (N steps)" is open
  questions: new Map(), // toolCallId → {index, answers, picked}
  posted: new Set(), // client tool calls this page has answered
  deciding: new Set(), // approvals this page has sent
  signatures: new Map(), // message id → what its article was built from
  articles: new Map(), // message id → article
  attachments: [], // uploaded, waiting for the next send
  unsubscribe: [],
  globalStops: [], // the list's and the family's listeners, until signing out
  files: new Map(), // storage path → Promise of an object URL
  model: null, // GET /agent/model: {model, demo, examples}
};

let config;
let auth;
let db;
let api;
let family;

async function boot() {
  config = await (await fetch("/config.json")).json();
  const app = initializeApp({ apiKey: config.apiKey, projectId: config.projectId, authDomain: "localhost" });
  auth = getAuth(app);
  db = getFirestore(app);
  if (config.authEmulator) connectAuthEmulator(auth, config.authEmulator, { disableWarnings: true });
  if (config.firestoreEmulator) {
    const [host, port] = config.firestoreEmulator.split(":");
    connectFirestoreEmulator(db, host, Number(port));
  }
  api = makeApi(() => auth.currentUser.getIdToken());
  family = makeFamilyPanel({
    $,
    api,
    uid: () => state.user && state.user.uid,
    open: (hash) => { location.hash = hash; },
  });
  if (config.testUser) {
    $("sign-in-hint").textContent = `Local test user: ${config.testUser.email}, password ${config.testUser.password} (or any e-mail and password: the Auth emulator signs you up).`;
  }
  wire();
  onAuthStateChanged(auth, (user) => {
    state.user = user;
    $("sign-in-view").hidden = Boolean(user);
    $("app-view").hidden = !user;
    $("who").hidden = $("sign-out").hidden = !user;
    closeAll(true);
    family.reset();
    if (user) {
      $("who").textContent = `Signed in as ${user.email}`;
      loadModel();
      listenToList();
      listenToFamily();
      route();
    } else {
      $("email").focus();
    }
  });
}

// ---- signing in -------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const email = $("email").value.trim();
  const password = $("password").value;
  $("sign-in-error").textContent = "";
  try {
    await signInWithEmailAndPassword(auth, email, password);
  } catch (error) {
    const unknown = ["auth/user-not-found", "auth/invalid-credential", "auth/invalid-login-credentials"];
    if (config.authEmulator && unknown.includes(error.code)) {
      try {
        await createUserWithEmailAndPassword(auth, email, password);
        return;
      } catch (second) {
        $("sign-in-error").textContent = second.code === "auth/email-already-in-use" ? "Wrong email or password." : second.message;
        return;
      }
    }
    $("sign-in-error").textContent = error.code === "auth/invalid-email" ? "That is not an e-mail address." : "Wrong email or password.";
  }
}

// ---- listeners ----------------------------------------------------------------------

const client = (...path) => [state.user.uid, "client", ...path];

function closeAll(list) {
  for (const stop of state.unsubscribe) stop();
  state.unsubscribe = [];
  if (list) {
    for (const stop of state.globalStops || []) stop();
    state.globalStops = [];
    state.listed = [];
  }
}

// A conversation between family members: the id alone says so, as on the server.
const isShared = (id) => /^(dm|fc)_/.test(id || "");

// A listener the SDK ends with an error (permission denied when it starts in the moment
// after sign-in, before the user's token reaches Firestore) is started again a second
// later, until it is stopped (signing out stops it): otherwise the panel it feeds would
// stay as it was until the page is reloaded.
function watch(target, next) {
  let stop = () => {};
  let retry = null;
  let stopped = false;
  const start = () => {
    stop = onSnapshot(target, next, (error) => {
      console.warn(`A listener stopped (${error.code}); it starts again.`);
      if (!stopped) retry = setTimeout(start, 1000);
    });
  };
  start();
  state.globalStops.push(() => {
    stopped = true;
    clearTimeout(retry);
    stop();
  });
}

function listenToList() {
  const conversations = query(collection(db, ...client("conversations")), orderBy("lastMessageAt", "desc"), limit(30));
  watch(conversations, (snapshot) => {
    state.listed = snapshot.docs.map((d) => ({ id: d.id, data: d.data() }));
    renderList();
  });
}

// The family panel and the titles of shared conversations follow the user's mirror.
function listenToFamily() {
  watch(doc(db, ...client("family", "current")), (snapshot) => {
    family.setFamily(snapshot.exists() ? snapshot.data() : null);
    renderList();
    render();
  });
  watch(doc(db, ...client("settings", "current")), (snapshot) => {
    family.setSettings(snapshot.exists() ? snapshot.data() : null);
  });
}

function listLabel({ data }, names) {
  const shared = sharedTitle(data, family.family, state.user.uid, names);
  if (shared) return shared;
  const first = (data.messages || []).find((m) => m.role === "user");
  return data.title || (first && first.content.map((p) => p.text || "").join("").slice(0, 60)) || "Conversation";
}

function renderList() {
  if (!state.user) return;
  const names = authorNames(state.listed.map((entry) => entry.data));
  $("conversation-list").replaceChildren(
    ...state.listed.map((entry) => {
      const link = document.createElement("a");
      link.href = `#/c/${entry.id}`;
      const kind = entry.data.kind;
      if (kind === "direct" || kind === "family") {
        const label = listLabel(entry, names);
        const what = kind === "direct" ? "direct messages" : "family messages";
        link.className = `shared ${kind}`;
        // Seen as a badge, heard as part of the name: "Dad, direct messages".
        link.setAttribute("aria-label", `${label}, ${what}`);
        const badge = document.createElement("span");
        badge.className = "kind";
        badge.textContent = kind === "direct" ? "direct" : "family";
        link.append(document.createTextNode(label), badge);
      } else {
        link.textContent = listLabel(entry, names);
      }
      if (entry.id === state.conversationId) link.setAttribute("aria-current", "page");
      const item = document.createElement("li");
      item.append(link);
      return item;
    }),
  );
}

// The shared conversation already listed for a member (`#/to/{userId}`) or the family
// (`#/family`), if any: a message to them lands there anyway.
function listedFor(target) {
  const mirror = family.family;
  if (!mirror) return null;
  const found = state.listed.find(({ data }) =>
    data.familyId === mirror.familyId &&
    (target.targetFamily ? data.kind === "family" : data.kind === "direct" && (data.participantIds || []).includes(target.targetUserId)),
  );
  return found ? found.id : null;
}

function route() {
  if (!state.user) return;
  const hash = location.hash;
  const match = /^#\/c\/([A-Za-z0-9_-]{1,64})$/.exec(hash);
  const member = /^#\/to\/([A-Za-z0-9_-]{1,128})$/.exec(hash);
  const target = member ? { targetUserId: member[1] } : hash === "#/family" ? { targetFamily: true } : null;
  if (target) {
    const listed = listedFor(target);
    if (listed) {
      location.replace(`#/c/${listed}`);
      return;
    }
  }
  open(match ? match[1] : null, target);
}

function open(conversationId, target = null) {
  const same = JSON.stringify(target) === JSON.stringify(state.target);
  if (conversationId === state.conversationId && same && state.unsubscribe.length) return;
  closeAll(false);
  Object.assign(state, { conversationId, conversation: null, earlier: [], loadedSegments: 0, target });
  state.tasks = new Map();
  state.signatures.clear();
  state.articles.clear();
  $("messages").replaceChildren();
  $("chat-title").textContent = conversationId ? "Conversation" : "New conversation";
  $("lesson").hidden = true;
  for (const link of $("conversation-list").querySelectorAll("a")) {
    if (link.getAttribute("href") === `#/c/${conversationId}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  render();
  if (!conversationId) return;
  const ref = doc(db, ...client("conversations", conversationId));
  state.unsubscribe.push(
    onSnapshot(ref, (snapshot) => {
      state.conversation = snapshot.exists() ? snapshot.data() : null;
      render();
      carryOutClientTools();
      followLesson();
    }),
  );
  const sections = query(collection(db, ...client("tasks")), where("conversationId", "==", conversationId));
  state.unsubscribe.push(
    onSnapshot(sections, (snapshot) => {
      state.tasks = new Map(snapshot.docs.map((d) => [d.data().toolCallId, d.data()]));
      render();
    }),
  );
}

let lessonFollowed = null;
function followLesson() {
  const id = state.conversation && state.conversation.documentId;
  if (!id || id === lessonFollowed) return;
  lessonFollowed = id;
  state.unsubscribe.push(
    onSnapshot(doc(db, ...client("lessons", id)), (snapshot) => {
      const lesson = snapshot.data();
      $("lesson").hidden = !lesson;
      if (!lesson) return;
      $("lesson-title").textContent = `Lesson: ${lesson.title}`;
      $("lesson-body").replaceChildren(lessonPreview(lesson.body));
    }),
  );
  state.unsubscribe.push(() => { lessonFollowed = null; });
}

async function loadEarlier() {
  const archived = state.conversation && state.conversation.archived;
  if (!archived) return;
  const segment = archived.segments - state.loadedSegments;
  if (segment < 1) return;
  const ref = doc(db, ...client("conversations", state.conversationId, "archive", String(segment).padStart(6, "0")));
  const found = await getDoc(ref);
  state.loadedSegments += 1;
  if (found.exists()) state.earlier = [...found.data().messages, ...state.earlier];
  render();
}

// ---- rendering ----------------------------------------------------------------------

const VISIBLE = new Set(["text", "image", "file", "tool_call"]);

// What a person sees: a message holding only tool results (hidden or not) shows nothing.
function shown() {
  return everything().filter(
    ({ message }) => message.status !== "complete" || (message.content || []).some((p) => VISIBLE.has(p.type)),
  );
}

function everything() {
  const conv = state.conversation;
  if (!conv) return [];
  const live = conv.messages || [];
  const ids = new Set(live.map((m) => m.id));
  const items = state.earlier.filter((m) => !ids.has(m.id)).map((m) => ({ message: m, queued: false }));
  for (const m of live) items.push({ message: m, queued: false });
  const active = conv.activeRun && conv.activeRun.message;
  if (active && !ids.has(active.id)) items.push({ message: active, queued: false });
  for (const m of conv.queuedMessages || []) items.push({ message: m, queued: true });
  return items;
}

function context(queued) {
  const results = new Map();
  for (const { message } of everything()) {
    for (const part of message.content || []) {
      if (part.type === "tool_result") results.set(part.toolResult.toolCallId, part.toolResult);
    }
  }
  return {
    uid: state.user.uid,
    results,
    tasks: state.tasks,
    expanded: state.expanded,
    questions: state.questions,
    queued,
    onToggle: (id) => {
      state.expanded.has(id) ? state.expanded.delete(id) : state.expanded.add(id);
      rerender(id, `button.done`);
    },
    onPick: (call, q, question, label) => {
      if (question.multiSelect) {
        q.picked = q.picked.includes(label) ? q.picked.filter((l) => l !== label) : [...q.picked, label];
        rerenderCall(call, `button.option[aria-pressed]`);
        return;
      }
      q.answers[q.index] = label;
      q.index += 1;
      rerenderCall(call, "section.question button");
    },
    onNext: (call, q) => {
      if (!q.picked.length) return;
      q.answers[q.index] = q.picked;
      q.picked = [];
      q.index += 1;
      rerenderCall(call, "section.question button");
    },
    onAnswer: (call, q) => answer(call, q),
    loadFile,
  };
}

function messageOf(callId) {
  for (const { message } of shown()) {
    if ((message.content || []).some((p) => p.type === "tool_call" && p.toolCall.id === callId)) return message.id;
  }
  return null;
}

function rerender(messageId, focus) {
  state.signatures.delete(messageId);
  render();
  const article = state.articles.get(messageId);
  const target = article && article.querySelector(focus);
  if (target) target.focus();
}

function rerenderCall(call, focus) {
  rerender(messageOf(call.id), focus);
}

function render() {
  if (!state.user) return;
  const conv = state.conversation;
  const items = shown();
  const container = $("messages");
  const wanted = [];
  const taskKey = JSON.stringify([...state.tasks.values()]);
  for (const { message, queued } of items) {
    const signature = JSON.stringify([message, queued, taskKey, message.status === "waiting" ? [...state.questions] : 0]);
    let article = state.articles.get(message.id);
    if (!article || state.signatures.get(message.id) !== signature) {
      const fresh = renderMessage(message, context(queued));
      if (article) article.replaceWith(fresh);
      article = fresh;
      state.articles.set(message.id, article);
      state.signatures.set(message.id, signature);
    }
    wanted.push(article);
  }
  const keep = new Set(wanted);
  for (const child of [...container.children]) if (!keep.has(child)) child.remove();
  wanted.forEach((article, index) => {
    if (container.children[index] !== article) container.insertBefore(article, container.children[index] || null);
  });
  for (const id of [...state.articles.keys()]) if (!items.some((i) => i.message.id === id)) state.articles.delete(id);

  renderHeading();
  renderExamples();
  const archived = conv && conv.archived;
  $("earlier").hidden = !(archived && archived.segments > state.loadedSegments);
  const run = conv && conv.activeRun;
  $("stop").hidden = shared();
  $("stop").disabled = !run || Boolean(run.stopRequestedAt);
  const waiting = run && run.waitingFor ? run.waitingFor : "";
  if (waiting !== state.waitingShown) $("composer-status").textContent = state.waitingShown = waiting;
  renderApprovals();
}

// Whether the open conversation (or the new one) is between family members.
function shared() {
  return Boolean(state.target) || isShared(state.conversationId);
}

// Who the open shared conversation is with: a member's name or the family's.
function sharedName() {
  const mirror = family.family;
  const target = state.target;
  if (target && target.targetFamily) return (mirror && mirror.name) || "your family";
  if (target) {
    const member = mirror && (mirror.members || []).find((m) => m.userId === target.targetUserId);
    return member ? member.displayName : "a family member";
  }
  return sharedTitle(state.conversation, mirror, state.user.uid, authorNames(state.listed.map((entry) => entry.data)));
}

function renderHeading() {
  const conv = state.conversation;
  let title = state.conversationId ? "Conversation" : "New conversation";
  let placeholder = "Ask Spark AI Agent…";
  const name = shared() && sharedName();
  if (name) {
    const direct = state.target ? Boolean(state.target.targetUserId) : state.conversationId.startsWith("dm_");
    title = `${name} (${direct ? "direct messages" : "family messages"})`;
    placeholder = `Write to ${name}…`;
  } else if (conv && conv.title) {
    title = conv.title;
  }
  if ($("chat-title").textContent !== title) $("chat-title").textContent = title;
  $("composer-text").placeholder = placeholder;
}

// Which model answers (the demo model offers what it recognises); asked once a sign-in.
async function loadModel() {
  state.model = null;
  try {
    state.model = await api.model();
  } catch {
    return; // nothing to offer: the conversation works the same
  }
  renderExamples();
}

// An empty conversation with the agent, when the demo model answers: its examples as
// buttons, each sent as if typed.
function renderExamples() {
  const model = state.model;
  const offer = Boolean(model && model.demo && model.examples.length) && !state.conversationId && !shared();
  $("examples").hidden = !offer;
  if (!offer || $("example-list").children.length) return;
  $("example-list").replaceChildren(
    ...model.examples.map((example) => {
      const item = document.createElement("li");
      item.append(
        button(example, () => {
          $("composer-text").value = example;
          $("composer").requestSubmit();
        }),
      );
      return item;
    }),
  );
}

function renderApprovals() {
  const conv = state.conversation;
  const waiting = [];
  for (const message of (conv && conv.messages) || []) {
    for (const part of message.content || []) {
      if (part.type === "tool_call" && part.toolCall.status === "awaiting_approval") waiting.push(part.toolCall);
    }
  }
  $("approvals").hidden = !waiting.length;
  const list = $("approval-list");
  const ids = waiting.map((c) => c.id).join(",");
  if (list.dataset.ids === ids) return;
  list.dataset.ids = ids;
  list.replaceChildren(
    ...waiting.map((call) => {
      const item = document.createElement("li");
      item.className = "approval";
      const title = document.createElement("p");
      const strong = document.createElement("strong");
      strong.textContent = call.displayText || call.name;
      title.append(strong, document.createTextNode(` (${call.name})`));
      const args = document.createElement("pre");
      try {
        args.textContent = JSON.stringify(JSON.parse(call.argsJson), null, 2);
      } catch {
        args.textContent = call.argsJson;
      }
      args.setAttribute("aria-label", "Arguments");
      const approve = button("Approve", () => decide(call, true));
      const deny = button("Deny", () => decide(call, false));
      item.append(title, args, approve, deny);
      return item;
    }),
  );
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

// ---- acting: the api ------------------------------------------------------------------

function say(text) {
  $("composer-status").textContent = text;
}

async function send(event) {
  event.preventDefault();
  const box = $("composer-text");
  const text = box.value.trim();
  if (!text && !state.attachments.length) return;
  // To family members the text is delivered as it is; to the agent it waits its turn.
  const body = shared() ? { text } : { text, whenBusy: "queue" };
  if (state.conversationId) body.conversationId = state.conversationId;
  else if (state.target) Object.assign(body, state.target);
  if (state.attachments.length) {
    body.attachments = state.attachments.map(({ storagePath, contentType, sizeBytes }) => ({ storagePath, contentType, sizeBytes }));
  }
  $("send").disabled = true;
  try {
    const sent = shared() ? await api.deliver(body, deliveryKey(body)) : await api.send(body);
    state.delivery = null;
    box.value = "";
    state.attachments = [];
    renderAttached();
    say("");
    if (!state.conversationId) location.hash = `#/c/${sent.conversationId}`;
  } catch (error) {
    say(error.message); // the text stays in the box: nothing the user wrote is lost
  } finally {
    $("send").disabled = false;
  }
}

// The same message sent again after a failure (a lost answer) keeps its
// Idempotency-Key, so the members get it once; a different message gets a new one.
function deliveryKey(body) {
  const fingerprint = JSON.stringify(body);
  if (!state.delivery || state.delivery.fingerprint !== fingerprint) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    const key = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    state.delivery = { fingerprint, key };
  }
  return state.delivery.key;
}

async function stop() {
  if (!state.conversationId) return;
  try {
    await api.stop(state.conversationId);
    say("Stopping…");
  } catch (error) {
    say(error.message);
  }
}

async function answer(call, q) {
  const answers = {};
  Object.entries(q.answers).forEach(([i, value]) => { answers[String(i)] = value; });
  try {
    await api.answer(state.conversationId, call.id, answers);
    state.questions.delete(call.id);
    say("");
  } catch (error) {
    say(error.message);
  }
}

async function decide(call, approved) {
  if (state.deciding.has(call.id)) return;
  state.deciding.add(call.id);
  try {
    await api.approve(state.conversationId, call.id, approved);
    say(approved ? "Approved." : "Denied.");
  } catch (error) {
    state.deciding.delete(call.id);
    say(error.message);
  }
}

// Client tools the page carries out itself: only once their message has ended (the
// api refuses a result before the call is saved), once per call per page.
function carryOutClientTools() {
  const conv = state.conversation;
  if (!conv) return;
  const results = context(false).results;
  for (const message of conv.messages || []) {
    for (const part of message.content || []) {
      const call = part.type === "tool_call" && part.toolCall;
      if (!call || call.execution !== "client" || call.status !== "pending") continue;
      if (results.has(call.id) || state.posted.has(call.id)) continue;
      state.posted.add(call.id);
      const [output, status] = clientTool(call);
      api.toolResult(state.conversationId, call.id, output, status).catch((error) => {
        if (error.status === 409 && error.code === "run_in_progress") state.posted.delete(call.id);
      });
    }
  }
}

function clientTool(call) {
  if (call.name !== "get_editor_selection") return [{ error: `This page cannot run ${call.name}.` }, "error"];
  const editor = $("editor");
  const selection = editor.value.slice(editor.selectionStart, editor.selectionEnd);
  return [{ documentId: (state.conversation && state.conversation.documentId) || null, selection }, "ok"];
}

// ---- attachments ----------------------------------------------------------------------

async function attach(event) {
  const input = event.target;
  for (const file of [...input.files]) {
    say(`Uploading ${file.name}…`);
    try {
      const session = await api.upload(file);
      let url = session.uploadUrl;
      // Locally the session points at the Storage emulator, which answers no CORS:
      // the page's own server forwards it (tools/web.py).
      if (config.uploadsVia && url.startsWith(config.uploadsVia)) url = url.slice(config.uploadsVia.length);
      const put = await fetch(url, { method: session.method, headers: session.headers, body: file });
      if (!put.ok) throw new Error(`The upload of ${file.name} failed (${put.status}).`);
      state.attachments.push({ storagePath: session.storagePath, contentType: file.type, sizeBytes: file.size, name: file.name });
      say(`${file.name} is attached.`);
    } catch (error) {
      say(error.message);
    }
  }
  input.value = "";
  renderAttached();
}

function renderAttached() {
  $("attached").replaceChildren(
    ...state.attachments.map((a, index) => {
      const item = document.createElement("li");
      item.append(document.createTextNode(`${a.name} `));
      item.append(button(`Remove ${a.name}`, () => { state.attachments.splice(index, 1); renderAttached(); }));
      return item;
    }),
  );
}

// The bytes of a file a message shows, as an object URL: one's own files through the
// page's server, another member's (in a shared conversation) through the api, which
// checks that a message of the caller's copy names it.
function loadFile(path) {
  const conversationId = state.conversationId;
  const viaApi = isShared(conversationId) && !path.startsWith(`${state.user.uid}/`);
  if (!viaApi && !config.filesUrl) return Promise.resolve(null);
  const key = viaApi ? `${conversationId}:${path}` : path;
  if (!state.files.has(key)) {
    const fetched = viaApi
      ? api.sharedFile(conversationId, path)
      : auth.currentUser
          .getIdToken()
          .then((token) => fetch(config.filesUrl + path.split("/").map(encodeURIComponent).join("/"), { headers: { Authorization: `Bearer ${token}` } }));
    state.files.set(
      key,
      fetched
        .then((r) => (r.ok ? r.blob() : null))
        .then((blob) => (blob ? URL.createObjectURL(blob) : null))
        .catch(() => null),
    );
  }
  return state.files.get(key);
}

// ---- wiring ----------------------------------------------------------------------------

function wire() {
  $("sign-in").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(auth));
  $("composer").addEventListener("submit", send);
  $("composer-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stop);
  $("earlier").addEventListener("click", loadEarlier);
  $("attach").addEventListener("change", attach);
  window.addEventListener("hashchange", route);
}

boot();
