// Drives Spark AI Agent's chat routes with the AI SDK's own DefaultChatTransport, as a
// useChat front end would, and prints what the client ends up showing.
//
// Input (argv[2], JSON): {api, token, action: "send" | "resume", chatId, messages, body}.
// Output (stdout, JSON): {message: the UI message the stream built (null: 204), chunks:
// the chunk types in order}. Any chunk the AI SDK refuses fails the script.
import { DefaultChatTransport, readUIMessageStream } from 'ai';

const input = JSON.parse(process.argv[2]);
const transport = new DefaultChatTransport({
  api: input.api,
  headers: { Authorization: `Bearer ${input.token}` },
  body: input.body ?? {},
});

let stream;
if (input.action === 'resume') {
  stream = await transport.reconnectToStream({ chatId: input.chatId });
} else {
  stream = await transport.sendMessages({
    chatId: input.chatId,
    messages: input.messages,
    trigger: input.trigger ?? 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
}
// The test may wait for this line (the server has answered) to let a held model go on.
process.stderr.write('open\n');
if (stream === null) {
  console.log(JSON.stringify({ message: null, chunks: [] }));
  process.exit(0);
}
const types = [];
const seen = stream.pipeThrough(
  new TransformStream({
    transform(chunk, controller) {
      types.push(chunk.type);
      controller.enqueue(chunk);
    },
  }),
);
let message = null;
const last = input.messages?.at(-1);
for await (const m of readUIMessageStream({
  message: last?.role === 'assistant' ? last : undefined,
  stream: seen,
  terminateOnError: true,
})) {
  message = m;
}
console.log(JSON.stringify({ message, chunks: types }));
