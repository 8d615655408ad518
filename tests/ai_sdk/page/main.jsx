// A front end built on the AI SDK's useChat, pointed at Spark AI Agent: the three
// options that matter are the transport (our chat route and the ID token), `resume`
// (after a reload, the reply being written is replayed and followed) and
// `sendAutomaticallyWhen` (an approval goes back in the next POST). The rest is display.
//
// The test sets `window.sparkToken` (a Firebase ID token) before the page loads; the
// chat's id stays in the URL (`?chat=`) and its messages in sessionStorage, so a reload
// shows the same chat and resumes the reply still being written.
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import { useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';

function chatId() {
  const url = new URL(location.href);
  let id = url.searchParams.get('chat');
  if (!id) {
    id = `chat_${crypto.randomUUID().replaceAll('-', '').slice(0, 16)}`;
    url.searchParams.set('chat', id);
    history.replaceState(null, '', url);
  }
  return id;
}

function Chat({ id, token }) {
  const kept = `messages:${id}`;
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id,
    messages: JSON.parse(sessionStorage.getItem(kept) ?? '[]'),
    transport: new DefaultChatTransport({
      api: '/api/spark/agent/chat',
      headers: { Authorization: `Bearer ${token}` },
    }),
    resume: true,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  useEffect(() => sessionStorage.setItem(kept, JSON.stringify(messages)), [kept, messages]);
  const [input, setInput] = useState('');
  const answer = (approval, approved) => addToolApprovalResponse({ id: approval.id, approved });

  return (
    <>
      <h1>useChat with Spark AI Agent</h1>
      <section aria-label="Messages">
        {messages.map((message) => (
          <Message key={message.id} message={message} answer={answer} />
        ))}
      </section>
      <p id="status" role="status">
        {error ? `Error: ${error.message}` : status}
      </p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input
          aria-label="Message"
          value={input}
          onChange={(event) => setInput(event.target.value)}
        />
        <button type="submit">Send</button>
      </form>
    </>
  );
}

function Message({ message, answer }) {
  const author = message.role === 'user' ? 'You' : 'Spark AI Agent';
  return (
    <article className={message.role} aria-label={author} data-message-id={message.id}>
      <h2>{author}</h2>
      {message.parts.map((part, index) => (
        <Part key={index} part={part} answer={answer} />
      ))}
    </article>
  );
}

function Part({ part, answer }) {
  if (part.type === 'text') return <p className="text">{part.text}</p>;
  if (part.type.startsWith('tool-')) return <Tool part={part} answer={answer} />;
  if (part.type === 'data-task') {
    return <p className="note">Task: {part.data.displayText ?? part.data.tool} ({part.data.status})</p>;
  }
  if (part.type === 'data-accepted') {
    return <p className="note">Accepted: the agent goes on in the background.</p>;
  }
  return null;
}

function Tool({ part, answer }) {
  const name = part.type.slice('tool-'.length);
  return (
    <div className="tool" role="group" aria-label={`Tool ${name}`} data-state={part.state}>
      <div>
        <strong>{name}</strong> <code>{JSON.stringify(part.input)}</code>
      </div>
      {part.state === 'approval-requested' && (
        <div>
          Spark AI Agent asks before it does this.
          <br />
          <button onClick={() => answer(part.approval, true)}>Approve</button>
          <button onClick={() => answer(part.approval, false)}>Deny</button>
        </div>
      )}
      {part.state === 'approval-responded' && (
        <div className="note">{part.approval.approved ? 'Approved.' : 'Denied.'}</div>
      )}
      {part.state === 'output-available' && <div className="note">Done.</div>}
      {part.state === 'output-error' && <div className="note">{part.errorText}</div>}
      {part.state === 'output-denied' && <div className="note">Denied.</div>}
    </div>
  );
}

createRoot(document.getElementById('root')).render(<Chat id={chatId()} token={window.sparkToken} />);
