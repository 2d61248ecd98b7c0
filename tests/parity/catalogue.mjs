// The Mastra side of the parity catalogue: every processor behaviour and tool that
// scenarios.json names, written against @mastra/core's own interfaces. The Python side
// (tests/parity/catalogue.py) implements the same behaviours against Threadline's; each
// behaviour is described once, in README.md ("The catalogue"), and both follow that text.
import { createTool } from '@mastra/core/tools';
import { z } from 'zod';

const userText = (m) => (m.content?.parts ?? []).filter((p) => p.type === 'text').map((p) => p.text).join(' ');
const withText = (m, fn) => ({
  ...m,
  content: {
    ...m.content,
    parts: m.content.parts.map((p) => (p.type === 'text' ? { ...p, text: fn(p.text) } : p)),
    ...(typeof m.content.content === 'string' ? { content: fn(m.content.content) } : {}),
  },
});
const lastUser = (messages) => messages.map((m) => m.role).lastIndexOf('user');

// Each factory takes the scenario's args and returns a processor object with `id`.
export const processors = {
  'block-word': ({ word }) => ({
    id: 'block-word',
    processInput({ messages, abort }) {
      for (const m of messages) {
        if (m.role === 'user' && userText(m).toLowerCase().includes(word)) abort(`Blocked word: ${word}`, { metadata: { word } });
      }
      return messages;
    },
  }),
  'prefix-user': ({ prefix }) => ({
    id: 'prefix-user',
    processInput({ messages }) {
      const i = lastUser(messages);
      return messages.map((m, j) => (j === i ? withText(m, (t) => prefix + t) : m));
    },
  }),
  'add-system': ({ text }) => ({
    id: 'add-system',
    processInput({ messages, systemMessages }) {
      return { messages, systemMessages: [...systemMessages, { role: 'system', content: text }] };
    },
  }),
  'input-retry': () => ({
    id: 'input-retry',
    processInput({ messages, abort, retryCount }) {
      if (retryCount === 0) abort('retry from input', { retry: true });
      return messages;
    },
  }),
  'step-system': ({ text, step = 0 }) => ({
    id: 'step-system',
    processInputStep({ stepNumber, systemMessages }) {
      if (stepNumber === step) return { systemMessages: [...systemMessages, { role: 'system', content: text }] };
      return undefined;
    },
  }),
  'step-override': ({ step = 0, override }) => ({
    id: 'step-override',
    processInputStep({ stepNumber }) {
      if (stepNumber !== step) return undefined;
      const out = { ...override };
      if (out.model) out.model = currentModel(out.model);
      if (out.structuredOutput) out.structuredOutput = { schema: schemas[out.structuredOutput.schema] };
      return out;
    },
  }),
  'step-abort': ({ step = 0 }) => ({
    id: 'step-abort',
    processInputStep({ stepNumber, abort }) {
      if (stepNumber === step) abort('stopped before the step', { metadata: { step } });
      return undefined;
    },
  }),
  'request-note': ({ text }) => ({
    id: 'request-note',
    processLLMRequest({ prompt }) {
      return { prompt: [...prompt, { role: 'user', content: [{ type: 'text', text }] }] };
    },
  }),
  'request-cache': ({ text }) => ({
    id: 'request-cache',
    processLLMRequest() {
      return { response: { chunks: text.split(' ').map((w, i, a) => ({ type: 'text-delta', payload: { id: 'txt-0', text: i < a.length - 1 ? w + ' ' : w } })) } };
    },
  }),
  'response-report': () => ({
    id: 'response-report',
    async processLLMResponse({ chunks, fromCache, stepNumber, writer }) {
      await writer?.custom({ type: 'data-llm-response', data: { stepNumber, fromCache, types: chunks.map((c) => c.type) } });
    },
  }),
  'context-report': ({ key }) => ({
    id: 'context-report',
    async processOutputStream({ part, requestContext, writer }) {
      if (part.type === 'finish') await writer.custom({ type: 'data-context', data: { [key]: requestContext?.get(key) ?? null } });
      return part;
    },
  }),
  'upper-stream': () => ({
    id: 'upper-stream',
    processOutputStream({ part }) {
      if (part.type === 'text-delta') return { ...part, payload: { ...part.payload, text: part.payload.text.toUpperCase() } };
      return part;
    },
  }),
  'drop-word': ({ word }) => ({
    id: 'drop-word',
    processOutputStream({ part }) {
      if (part.type === 'text-delta' && part.payload.text.includes(word)) return null;
      return part;
    },
  }),
  'abort-stream': ({ word, retry = false }) => ({
    id: 'abort-stream',
    processOutputStream({ part, abort, retryCount }) {
      if (part.type === 'text-delta' && part.payload.text.includes(word) && (!retry || retryCount === 0)) {
        abort(`no ${word}`, { retry, metadata: { word } });
      }
      return part;
    },
  }),
  'word-counter': () => ({
    id: 'word-counter',
    async processOutputStream({ part, state, writer }) {
      state.words = state.words ?? 0;
      if (part.type === 'text-delta') state.words += part.payload.text.split(/\s+/).filter(Boolean).length;
      if (part.type === 'finish') await writer.custom({ type: 'data-word-count', data: { words: state.words } });
      return part;
    },
  }),
  'parts-seen': () => ({
    id: 'parts-seen',
    async processOutputStream({ part, streamParts, writer }) {
      if (part.type === 'finish') await writer.custom({ type: 'data-parts-seen', data: { types: streamParts.map((p) => p.type) } });
      return part;
    },
  }),
  'retry-unless': ({ word, metadata = null, times = 1 }) => ({
    id: 'retry-unless',
    processOutputStep({ text, abort, retryCount, messages }) {
      if (!(text ?? '').includes(word) && retryCount < times) abort('add detail', { retry: true, metadata });
      return messages;
    },
  }),
  'step-guard': ({ word }) => ({
    id: 'step-guard',
    processOutputStep({ text, abort, messages }) {
      if ((text ?? '').includes(word)) abort(`step mentions ${word}`, { metadata: { word } });
      return messages;
    },
  }),
  'step-report': () => ({
    id: 'step-report',
    async processOutputStep({ stepNumber, finishReason, toolCalls, text, retryCount, writer, messages }) {
      await writer?.custom({ type: 'data-step-report', data: { stepNumber, finishReason, text: text ?? '', retryCount,
        toolCalls: (toolCalls ?? []).map((c) => c.toolName) } });
      return messages;
    },
  }),
  'result-upper': () => ({
    id: 'result-upper',
    processOutputResult({ messages }) {
      return messages.map((m) => (m.role === 'assistant' ? withText(m, (t) => t.toUpperCase()) : m));
    },
  }),
  'result-abort': () => ({
    id: 'result-abort',
    processOutputResult({ abort }) {
      abort('final answer rejected');
    },
  }),
  'tool-result-abort': ({ tool }) => ({
    id: 'tool-result-abort',
    processToolResult({ toolName, abort }) {
      if (toolName === tool) abort(`${tool} result not allowed`);
      return undefined;
    },
  }),
  'api-error-retry': ({ times = 1 }) => ({
    id: 'api-error-retry',
    processAPIError({ retryCount }) {
      return { retry: retryCount < times };
    },
  }),
};

let modelFor = null;
/** Set by the runner: (name) => a language model for the fake server's model `name`. */
export function setModelFactory(fn) {
  modelFor = fn;
}
function currentModel(name) {
  return modelFor(name);
}

export const schemas = {
  forecast: z.object({ city: z.string(), celsius: z.number() }),
};

const CUSTOMERS = {
  'C-1001': { id: 'C-1001', name: 'Ada Lovelace', plan: 'pro', open_tickets: 2 },
  'C-1002': { id: 'C-1002', name: 'Alan Turing', plan: 'free', open_tickets: 0 },
};

export const tools = {
  lookup_customer: () => createTool({
    id: 'lookup_customer',
    description: "Look up a customer's plan and open tickets by customer id.",
    inputSchema: z.object({ customer_id: z.string().describe('Customer id, e.g. C-1001') }),
    execute: async (input) => CUSTOMERS[input.customer_id] ?? { error: `no customer ${input.customer_id}` },
  }),
  add: () => createTool({
    id: 'add',
    description: 'Add two numbers.',
    inputSchema: z.object({ a: z.number(), b: z.number() }),
    execute: async (input) => ({ sum: input.a + input.b }),
  }),
  add_approved: () => createTool({
    id: 'add_approved',
    description: 'Add two numbers, once a person approves.',
    inputSchema: z.object({ a: z.number(), b: z.number() }),
    requireApproval: true,
    execute: async (input) => ({ sum: input.a + input.b }),
  }),
  fail_tool: () => createTool({
    id: 'fail_tool',
    description: 'Always fails.',
    inputSchema: z.object({}),
    execute: async () => {
      throw new Error('tool failed on purpose');
    },
  }),
  progress: () => createTool({
    id: 'progress',
    description: 'Reports progress, then returns.',
    inputSchema: z.object({}),
    execute: async (_input, context) => {
      await context?.writer?.custom({ type: 'data-progress', data: { pct: 100 } });
      return { done: true };
    },
  }),
};

// Tool hooks (the agent's `hooks`): each factory takes the scenario's args.
export const hooks = {
  // beforeToolCall: skip `tool` and answer `output` instead.
  'skip-tool': ({ tool, output }) => ({
    beforeToolCall: (ctx) => (ctx.toolName === tool ? { proceed: false, output } : undefined),
  }),
  // afterToolCall: stamp the agent's name (hook metadata) on an object result.
  'stamp-agent': () => ({
    afterToolCall: (ctx) => {
      if (ctx.output && typeof ctx.output === 'object') ctx.output.seenBy = ctx.metadata?.agentName ?? null;
    },
  }),
};
