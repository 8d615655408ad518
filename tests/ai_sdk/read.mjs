// Reads a UI message stream's bytes (stdin) as the AI SDK's transport does: every chunk
// is validated against the AI SDK's own schema, then folded into the UI message a
// useChat front end would show. Prints {message, chunks, sendsToolOutputs: whether a
// front end with sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls would
// post it back}; a refused chunk fails.
import {
  lastAssistantMessageIsCompleteWithToolCalls,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from 'ai';

const body = [];
for await (const piece of process.stdin) body.push(piece);
const bytes = new ReadableStream({
  start(controller) {
    controller.enqueue(new Uint8Array(Buffer.concat(body)));
    controller.close();
  },
});
const types = [];
const chunks = parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema }).pipeThrough(
  new TransformStream({
    transform(part, controller) {
      if (!part.success) throw part.error;
      types.push(part.value.type);
      controller.enqueue(part.value);
    },
  }),
);
let message = null;
for await (const m of readUIMessageStream({ stream: chunks, terminateOnError: true })) message = m;
const sendsToolOutputs = lastAssistantMessageIsCompleteWithToolCalls({ messages: [message] });
console.log(JSON.stringify({ message, chunks: types, sendsToolOutputs }));
