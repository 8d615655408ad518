// A chat as a front end holds it: the AI SDK's own AbstractChat (what useChat wraps) on
// its DefaultChatTransport, pointed at Spark AI Agent, made fresh from the messages
// given (a reload: what the server holds, rebuilt), then one thing a person does.
//
// Input (argv[2], JSON): {api, token, chatId, messages, body, action}, where action is
//   {send: {text, files?}}                      sendMessage (files: FileUIParts)
//   {approve: {id, approved, reason?}}          addToolApprovalResponse; sent on its own
//   {output: {tool, toolCallId, output}}        addToolOutput; sent on its own
//   {resume: true}                              resumeStream (nothing on 204)
//   {regenerate: {messageId?}}                  regenerate (the last reply, made again)
// Output (stdout, JSON): {messages: what the chat shows after it, requests: [{kind,
// chunks: the chunk types read}], status}. A chunk the AI SDK refuses, or any error the
// chat reports, fails the script.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

const input = JSON.parse(process.argv[2]);

class State {
  constructor(messages) {
    this.messages = messages;
    this.status = 'ready';
    this.error = undefined;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new State(messages ?? []) });
  }
}

// The transport's streams, each tapped to record the chunk types it read.
const inner = new DefaultChatTransport({
  api: input.api,
  headers: { Authorization: `Bearer ${input.token}` },
  body: input.body ?? {},
});
const requests = [];
function tapped(kind, stream) {
  const seen = { kind, chunks: [] };
  requests.push(seen);
  // The test may wait for this line (its stream is open: the server has answered) to
  // let a held model go on, instead of pacing the model in real time.
  process.stderr.write(`open ${kind}\n`);
  if (stream === null) return null;
  return stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        seen.chunks.push(chunk.type);
        controller.enqueue(chunk);
      },
    }),
  );
}
const transport = {
  resumeStreamIsReplay: inner.resumeStreamIsReplay,
  sendMessages: async (options) => tapped('send', await inner.sendMessages(options)),
  reconnectToStream: async (options) => tapped('resume', await inner.reconnectToStream(options)),
};

const errors = [];
const chat = new Chat({
  id: input.chatId,
  messages: input.messages ?? [],
  transport,
  onError: (error) => errors.push(String(error?.stack ?? error)),
  // As a front end that answers approvals and client tools would set it.
  sendAutomaticallyWhen: (options) =>
    lastAssistantMessageIsCompleteWithApprovalResponses(options) ||
    lastAssistantMessageIsCompleteWithToolCalls(options),
});

const action = input.action;
if (action.send) await chat.sendMessage(action.send);
else if (action.approve) await chat.addToolApprovalResponse(action.approve);
else if (action.output) await chat.addToolOutput(action.output);
else if (action.resume) await chat.resumeStream();
else if (action.regenerate) await chat.regenerate(action.regenerate);
else throw new Error(`no such action: ${JSON.stringify(action)}`);

// An answer is sent by the chat itself (sendAutomaticallyWhen), after the call returns:
// wait until it has been sent and read to its end.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const deadline = Date.now() + 60_000;
let idle = 0;
while (idle < 5 && Date.now() < deadline) {
  await sleep(50);
  idle = chat.status === 'submitted' || chat.status === 'streaming' ? 0 : idle + 1;
}
if (errors.length || chat.status === 'error') {
  console.error(errors.join('\n') || String(chat.error));
  process.exit(1);
}
console.log(JSON.stringify({ messages: chat.messages, requests, status: chat.status }));
