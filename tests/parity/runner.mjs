// The Mastra side of the parity suite: runs every scenario of scenarios.json on @mastra/core
// in-process (its own in-memory storage) against the fake model server, and writes what it saw.
//
//   node runner.mjs <scenarios.json> <fake server url> <out.json> [scenario id ...]
//
// Per scenario it records: `chunks` (the thread subscription's stream), `streams` (each
// stream call's own fullStream), `requests` (every model request body, from the server's
// journal), `thread` (the stored messages) and `returns` (what each call returned).
import { readFileSync, writeFileSync } from 'node:fs';
import { Agent } from '@mastra/core/agent';
import { Mastra } from '@mastra/core';
import { InMemoryStore } from '@mastra/core/storage';
import { RequestContext } from '@mastra/core/request-context';
import { Memory } from '@mastra/memory';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { hooks, processors, setModelFactory, schemas, tools } from './catalogue.mjs';

const [scenariosPath, base, outPath, ...only] = process.argv.slice(2);
const table = JSON.parse(readFileSync(scenariosPath, 'utf8'));
const provider = createOpenAICompatible({ name: 'openai', baseURL: `${base}/v1`, apiKey: 'parity', includeUsage: true });
setModelFactory((name) => provider.chatModel(name));
const RESOURCE = 'res-parity';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function fake(path, body, method = 'POST') {
  const res = await fetch(base + path, { method, headers: { 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
  return res.json();
}

const build = (list) => (list ?? []).map(({ kind, args }) => processors[kind](args ?? {}));
const toolset = (names) => Object.fromEntries((names ?? []).map((n) => [n, tools[n]()]));

function makeAgent(s, spec, model, memory) {
  const subAgents = Object.fromEntries((spec.agents ?? []).map((sub) => [sub.key, makeAgent(s, sub, `${model}-${sub.key}`)]));
  return new Agent({
    id: spec.key ?? 'parity',
    name: spec.key ?? 'parity',
    description: spec.description ?? `the ${spec.key ?? 'parity'} agent`,
    instructions: spec.instructions ?? '',
    model: provider.chatModel(model),
    tools: toolset(spec.tools),
    inputProcessors: build(spec.input_processors),
    outputProcessors: build(spec.output_processors),
    errorProcessors: build(spec.error_processors),
    ...(spec.max_processor_retries !== undefined ? { maxProcessorRetries: spec.max_processor_retries } : {}),
    ...(spec.max_retries !== undefined ? { maxRetries: spec.max_retries } : {}),
    ...(memory ? { memory } : {}),
    ...(spec.hooks ? { hooks: Object.assign({}, ...spec.hooks.map(({ kind, args }) => hooks[kind](args ?? {}))) } : {}),
    ...(spec.notifications ? { notifications: spec.notifications } : {}),
    ...(Object.keys(subAgents).length ? { agents: subAgents } : {}),
  });
}

function options(call) {
  const opts = { ...(call.options ?? {}) };
  if (opts.structuredOutput) opts.structuredOutput = { ...opts.structuredOutput, schema: schemas[opts.structuredOutput.schema] };
  if (opts.requestContext) opts.requestContext = new RequestContext(Object.entries(opts.requestContext));
  for (const key of ['inputProcessors', 'outputProcessors']) if (opts[key]) opts[key] = build(opts[key]);
  return opts;
}

const pick = (obj, keys) => Object.fromEntries(keys.filter((k) => obj?.[k] !== undefined).map((k) => [k, obj[k]]));
const RESULT_KEYS = ['text', 'finishReason', 'object', 'tripwire', 'error', 'usage'];

async function drain(stream, into) {
  for await (const chunk of stream) into.push(chunk);
}

async function call(agent, c, thread, rec, sub) {
  const target = { resourceId: RESOURCE, threadId: thread, ...(c.ifActive ? { ifActive: c.ifActive } : {}),
    ...(c.ifIdle ? { ifIdle: c.ifIdle } : {}) };
  const memory = { memory: { ...(c.options?.memory ?? {}), resource: RESOURCE, thread } };
  switch (c.verb) {
    case 'stream': {
      const out = await agent.stream(c.message, { ...options(c), ...memory });
      const own = [];
      rec.streams.push(own);
      await drain(out.fullStream, own);
      return { verb: 'stream', result: pick({ text: await out.text, finishReason: await out.finishReason,
        object: c.options?.structuredOutput ? await out.object : undefined, tripwire: out.tripwire, error: out.error }, RESULT_KEYS) };
    }
    case 'generate': {
      const r = await agent.generate(c.message, { ...options(c), ...memory });
      return { verb: 'generate', result: pick(r, RESULT_KEYS) };
    }
    case 'sendMessage':
    case 'queueMessage': {
      const r = agent[c.verb](c.message, target);
      return { verb: c.verb, accepted: pick(await r.accepted, ['action', 'runId', 'reason']), signal: r.signal };
    }
    case 'sendSignal': {
      const r = agent.sendSignal(c.signal, target);
      return { verb: c.verb, accepted: pick(await r.accepted, ['action', 'runId', 'reason']), signal: r.signal };
    }
    case 'sendStateSignal': {
      const r = await agent.sendStateSignal(c.state, target);
      if (r.skipped) return { verb: c.verb, skipped: true, reason: r.reason };
      return { verb: c.verb, accepted: pick(await r.accepted, ['action', 'runId', 'reason']), signal: r.signal };
    }
    case 'sendNotificationSignal': {
      const r = await agent.sendNotificationSignal(c.notification, target);
      const accepted = async (a) => ({ ...pick(a, ['action', 'runId']), ...(a.output ? { output: true } : {}) });
      const one = async (x) => ({ ...pick(x, ['record', 'decision', 'runId', 'signal']),
        ...(x.persisted ? { persisted: true } : {}),
        ...(x.accepted ? { accepted: await accepted(await x.accepted) } : {}) });
      return { verb: c.verb, result: Array.isArray(r) ? await Promise.all(r.map(one)) : await one(r) };
    }
    case 'approveToolCall':
    case 'declineToolCall': {  // the run's held call, as its tool-call-approval chunk names it
      const held = rec.chunks.filter((x) => x.type === 'tool-call-approval').at(-1);
      const params = { runId: held?.runId, toolCallId: held?.payload?.toolCallId, ...memory, ...(c.reason ? { reason: c.reason } : {}) };
      const out = await agent[c.verb](params);
      const own = [];
      rec.streams.push(own);
      await drain(out.fullStream, own);
      return { verb: c.verb, result: pick({ text: await out.text, finishReason: await out.finishReason }, RESULT_KEYS) };
    }
    case 'abort':
      return { verb: 'abort', aborted: sub.abort() };
    case 'activeRunId':
      return { verb: 'activeRunId', running: sub.activeRunId() !== null };
    default:
      throw new Error(`unknown verb ${c.verb}`);
  }
}

async function waitFor(chunks, pred, ms = 15000) {
  const end = Date.now() + ms;
  while (!chunks.some(pred)) {
    if (Date.now() > end) return false;
    await sleep(10);
  }
  return true;
}

// Resolves once chunks have arrived and none came for QUIET_MS (a run that ends without
// `finish`: a tripwire, an abort), when none came at all for twice that, or after `ms`.
const QUIET_MS = 3000;
async function quiet(chunks, lastAt, ms) {
  const end = Date.now() + ms;
  const calm = Date.now();
  while (Date.now() < end) {
    if (chunks.length ? Date.now() - Math.max(lastAt(), calm) > QUIET_MS : Date.now() - calm > 2 * QUIET_MS) return;
    await sleep(50);
  }
}

// The whole stored thread, as Threadline's side reads its `messages` rows: recall with
// `perPage: false` (the agent's `lastMessages` would otherwise cut the thread to its tail) and
// `hideSignals: false` (recall leaves out system reminders by default). A signal persisted on an
// idle thread (`ifIdle: persist`, a low-priority notification) is saved before any run created
// the thread, where recall answers "No thread found": then the memory store's rows are read.
async function storedThread(ag, storage, thread) {
  const mem = await ag.getMemory();
  let messages;
  try {
    ({ messages } = await mem.recall({ threadId: thread, resourceId: RESOURCE, perPage: false, hideSignals: false }));
  } catch (e) {
    const store = await storage.getStore('memory');
    ({ messages } = await store.listMessages({ threadId: thread, resourceId: RESOURCE, perPage: false }));
  }
  return messages.map((m) => ({ role: m.role, content: m.content }));
}

async function runScenario(s) {
  const model = `threadline-parity-${s.id}`;
  await fake('/_fake/script', { scripts: s.script ?? [], model });
  for (const sub of s.agent.agents ?? []) await fake('/_fake/script', { scripts: sub.script ?? [], model: `${model}-${sub.key}` });
  for (const [suffix, scripts] of Object.entries(s.extra_scripts ?? {})) await fake('/_fake/script', { scripts, model: `${model}-${suffix}` });
  const storage = new InMemoryStore();
  const memory = new Memory({ storage, options: { lastMessages: 40, ...(s.agent.memory ?? {}) } });
  const agent = makeAgent(s, s.agent, model, memory);
  const mastra = new Mastra({ agents: { parity: agent }, storage, logger: false });
  const ag = mastra.getAgent('parity');
  const thread = `th-${s.id}`;
  const rec = { chunks: [], streams: [], returns: [], requests: [], thread: [] };
  const sub = await ag.subscribeToThread({ resourceId: RESOURCE, threadId: thread });
  const finishes = s.finishes ?? s.calls.length;
  let last = Date.now();
  const pump = (async () => {
    for await (const chunk of sub.stream) {
      rec.chunks.push(chunk);
      last = Date.now();
      if (rec.chunks.filter((x) => x.type === 'finish').length >= finishes) return;
    }
  })();
  for (const c of s.calls) {
    if (c.wait && !(await waitFor(rec.chunks, (x) => x.type === c.wait))) (rec.missed ??= []).push(c.wait);
    if (c.sleep_s) await sleep(c.sleep_s * 1000);
    try {
      rec.returns.push(await call(ag, c, thread, rec, sub));
    } catch (e) {
      rec.returns.push({ verb: c.verb, raised: String(e?.message ?? e) });
    }
  }
  await Promise.race([pump, quiet(rec.chunks, () => last, (s.timeout_s ?? 30) * 1000)]);
  await sleep(300); // Mastra saves the last messages just after `finish`
  sub.unsubscribe();
  const journal = await fake(`/_fake/requests`, undefined, 'GET');
  const models = new Set([model, ...(s.agent.agents ?? []).map((a) => `${model}-${a.key}`), ...Object.keys(s.extra_scripts ?? {}).map((k) => `${model}-${k}`)]);
  rec.requests = journal.requests.filter((r) => models.has(r.model)).map((r) => ({ model: r.model, body: r.body }));
  rec.thread = await storedThread(ag, storage, thread);
  return rec;
}

const out = {};
const CONCURRENCY = 8; // scenarios at once: each has its own storage, thread and model queue
const todo = table.scenarios.filter((s) => !only.length || only.includes(s.id));
async function worker() {
  for (let s = todo.shift(); s; s = todo.shift()) {
    const t0 = Date.now();
    try {
      out[s.id] = await runScenario(s);
    } catch (e) {
      out[s.id] = { failed: String(e?.stack ?? e) };
    }
    out[s.id].seconds = (Date.now() - t0) / 1000;
    if (out[s.id].failed) process.stderr.write(`mastra ${s.id} FAILED: ${out[s.id].failed}\n`);
  }
}
await Promise.all(Array.from({ length: CONCURRENCY }, worker));
writeFileSync(outPath, JSON.stringify(out, (k, v) => (v instanceof Error ? { message: v.message, name: v.name } : v), 1));
process.exit(0);
