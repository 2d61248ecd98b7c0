// @mastra/client-js 1.47.0, unchanged, against the gateway's /api (decision 132).
// Usage: node suite.mjs <scenario>   (tests/clients/test_client_js.py runs each scenario)
// Env: GATEWAY_URL, KEY_A (tenant-a's key), KEY_B (tenant-b's), RESOURCE (tenant-a), MODEL_URL (fake model server).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MastraClient, MastraClientError } from "@mastra/client-js";

const { GATEWAY_URL, KEY_A, KEY_B, RESOURCE, MODEL_URL } = process.env;
const AGENT = "gateway-tools";
const MODEL = "threadline-gateway-tools";

const client = (key) => new MastraClient({ baseUrl: GATEWAY_URL, headers: { Authorization: `Bearer ${key}` }, retries: 0 });
const mastra = client(KEY_A);
const thread = () => `cjs-${randomUUID().slice(0, 12)}`;
const memory = (threadId) => ({ resource: RESOURCE, thread: threadId });

async function script(scripts, model = MODEL) {
  const r = await fetch(`${MODEL_URL}/_fake/script`, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ scripts: Array.isArray(scripts) ? scripts : [scripts], model }) });
  assert.equal(r.status, 200, await r.text());
}

async function rejects(promise, status) {
  await assert.rejects(promise, (err) => err instanceof MastraClientError && err.status === status,
    `expected HTTP ${status}`);
}

const waitFor = async (check, what, timeoutMs = 30000) => {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

const scenarios = {
  async agents() {
    const all = await mastra.listAgents();
    assert.ok(all[AGENT], `listAgents has ${AGENT}: ${Object.keys(all)}`);
    const details = await mastra.getAgent(AGENT).details();
    assert.equal(details.name, AGENT);
    assert.equal(details.instructions, "You add numbers.");
    assert.equal(details.provider, "openai");
    assert.equal(details.modelId, MODEL);
    assert.equal(details.tools.add.description, "add two numbers");
    const schema = JSON.parse(details.tools.add.inputSchema);
    assert.deepEqual(Object.keys(schema.properties).sort(), ["a", "b"]);
    await rejects(mastra.getAgent("no-such-agent").details(), 404);
    await rejects(client("not-a-key").listAgents(), 401);
  },

  async generate() {
    await script({ text: "the answer is 42" });
    const threadId = thread();
    const out = await mastra.getAgent(AGENT).generate("question?", { memory: memory(threadId) });
    assert.equal(out.text, "the answer is 42");
    assert.equal(out.finishReason, "stop");
    assert.ok(out.runId);
    // memory.thread as an object: its title is the new thread's
    const titled = thread();
    await script({ text: "fine" });
    await mastra.getAgent(AGENT).generate("hello", { memory: { resource: RESOURCE, thread: { id: titled, title: "Titled" } } });
    assert.equal((await mastra.getMemoryThread({ threadId: titled }).get()).title, "Titled");
    // another tenant names tenant-a: 403 before anything runs
    await rejects(client(KEY_B).getAgent(AGENT).generate("hi", { memory: memory(thread()) }), 403);
    // without a memory thread Threadline cannot run the call: a 400 that says so
    await rejects(mastra.getAgent(AGENT).generate("hi"), 400);
  },

  async stream() {
    await script([{ tool_calls: [{ id: "t1", name: "add", arguments: '{"a":2,"b":3}' }] }, { chunks: ["it is", " 5"] }]);
    const response = await mastra.getAgent(AGENT).stream("2+3?", { memory: memory(thread()) });
    const chunks = [];
    await response.processDataStream({ onChunk: async (chunk) => { chunks.push(chunk); } });
    const types = chunks.map((c) => c.type);
    assert.ok(types.includes("tool-call"), types.join(","));
    assert.equal(types.at(-1), "finish");
    assert.equal(chunks.find((c) => c.type === "tool-result").payload.result, 5);
    const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join("");
    assert.equal(text, "it is 5");
    assert.equal(new Set(chunks.map((c) => c.runId)).size, 1);
  },

  async signals() {
    const agent = mastra.getAgent(AGENT);
    const threadId = thread();
    await script([{ chunks: ["w0 ", "w1 ", "w2 ", "w3 ", "w4 ", "w5 "], chunk_delay: 0.15 }, { text: "got it" },
                  { text: "queued turn" }]);
    const sub = await agent.subscribeToThread({ resourceId: RESOURCE, threadId });
    const seen = [];
    const reading = sub.processDataStream({ onChunk: async (chunk) => { seen.push(chunk); } });
    const first = await agent.sendMessage({ message: "start", resourceId: RESOURCE, threadId });
    assert.equal(first.accepted, true);
    assert.ok(first.runId);
    await waitFor(() => seen.some((c) => c.type === "text-delta"), "the first run's text");
    const mid = await agent.sendMessage({ message: "also this", resourceId: RESOURCE, threadId });
    assert.equal(mid.accepted, true);
    assert.equal(mid.runId, first.runId, "delivered into the running run");
    const queued = await agent.queueMessage({ message: "next turn", resourceId: RESOURCE, threadId });
    assert.equal(queued.accepted, true);
    await waitFor(() => seen.filter((c) => c.type === "finish").length >= 2, "two finished runs");
    const runs = [...new Set(seen.filter((c) => c.type === "finish").map((c) => c.runId))];
    assert.equal(runs[0], first.runId);
    const signal = await agent.sendSignal({ signal: { type: "reactive", contents: "the build is green" },
                                            resourceId: RESOURCE, threadId, ifIdle: { behavior: "persist" } });
    assert.equal(signal.accepted, true);
    assert.deepEqual(await agent.abortThread({ resourceId: RESOURCE, threadId }), { aborted: false });
    sub.unsubscribe();
    await reading;
    // the thread is tenant-a's: tenant-b gets 403 for naming tenant-a
    await rejects(client(KEY_B).getAgent(AGENT).sendMessage({ message: "x", resourceId: RESOURCE, threadId }), 403);
  },

  async memory() {
    const agentId = AGENT;
    const threadId = thread();
    const created = await mastra.createMemoryThread({ resourceId: RESOURCE, threadId, title: "Planning",
                                                     metadata: { topic: "sums" }, agentId });
    assert.equal(created.id, threadId);
    assert.equal(created.resourceId, RESOURCE);
    const handle = mastra.getMemoryThread({ threadId, agentId });
    assert.equal((await handle.get()).title, "Planning");
    const updated = await handle.update({ title: "Sums", metadata: { topic: "addition" } });
    assert.equal(updated.title, "Sums");
    assert.deepEqual(updated.metadata, { topic: "addition" });
    await script([{ text: "one" }, { text: "two" }]);
    await mastra.getAgent(agentId).generate("first", { memory: memory(threadId) });
    await mastra.getAgent(agentId).generate("second", { memory: memory(threadId) });
    const page0 = await handle.listMessages({ page: 0, perPage: 3 });
    assert.equal(page0.total, 4);
    assert.equal(page0.hasMore, true);
    assert.deepEqual(page0.messages.map((m) => m.role), ["user", "assistant", "user"]);
    assert.equal(page0.messages[0].threadId, threadId);
    assert.equal(page0.messages[0].content.format, 2);
    const page1 = await handle.listMessages({ page: 1, perPage: 3 });
    assert.equal(page1.hasMore, false);
    assert.deepEqual(page1.messages.map((m) => m.role), ["assistant"]);
    const listed = await mastra.listMemoryThreads({ resourceId: RESOURCE, agentId, perPage: 100 });
    assert.ok(listed.threads.some((t) => t.id === threadId && t.title === "Sums"));
    const byTopic = await mastra.listMemoryThreads({ resourceId: RESOURCE, agentId, metadata: { topic: "addition" } });
    assert.ok(byTopic.threads.some((t) => t.id === threadId));
    assert.ok(byTopic.threads.every((t) => t.metadata.topic === "addition"));
    const none = await mastra.listMemoryThreads({ resourceId: RESOURCE, agentId, metadata: { topic: "nope" } });
    assert.deepEqual([none.total, none.threads.length, none.hasMore], [0, 0, false]);
    await rejects(handle.listMessages({ include: [{ id: "m1" }] }), 400);
    assert.equal((await mastra.getMemoryStatus(agentId)).result, true);
    const config = await mastra.getMemoryConfig({ agentId });
    assert.equal(config.config.semanticRecall, false);
    // tenancy: another tenant sees no such thread, and cannot list tenant-a's
    await rejects(client(KEY_B).getMemoryThread({ threadId, agentId }).get(), 404);
    await rejects(client(KEY_B).getMemoryThread({ threadId, agentId }).listMessages(), 404);
    await rejects(client(KEY_B).listMemoryThreads({ resourceId: RESOURCE, agentId }), 403);
    // the AI SDK's UI messages of the same page
    assert.deepEqual(page0.uiMessages.map((m) => [m.id, m.role]), page0.messages.map((m) => [m.id, m.role]));
    assert.deepEqual(page0.uiMessages[1].parts.filter((p) => p.type === "text").map((p) => p.text), ["one"]);
    assert.equal(page0.uiMessages[0].metadata.threadId, threadId);
    // delete: another tenant sees no such thread; then the thread and its messages are gone
    await rejects(client(KEY_B).getMemoryThread({ threadId, agentId }).delete(), 404);
    assert.deepEqual(await handle.delete(), { result: "Thread deleted" });
    await rejects(handle.get(), 404);
    await rejects(handle.listMessages(), 404);
    await rejects(handle.delete(), 404);
    // a new run on the same id starts from nothing: the model is not sent the deleted messages
    await script({ text: "fresh" });
    assert.equal((await mastra.getAgent(agentId).generate("third", { memory: memory(threadId) })).text, "fresh");
    const sent = (await (await fetch(`${MODEL_URL}/_fake/requests`)).json()).requests.at(-1).body.messages;
    const said = JSON.stringify(sent);
    assert.ok(said.includes("third") && !said.includes("first") && !said.includes("two"), said);
    assert.equal((await handle.listMessages()).total, 2);
  },

  async approval() {
    // a tool with requireApproval: the stream ends at tool-call-approval; approve → the rest of the run;
    // a second answer is refused (the tool ran once); decline → the model reads the reason
    const agent = mastra.getAgent("approver-add");
    const model = "threadline-approver-add";
    const read = async (response) => {
      const chunks = [];
      await response.processDataStream({ onChunk: async (chunk) => { chunks.push(chunk); } });
      return chunks;
    };
    for (const verb of ["approve", "decline"]) {
      await script([{ tool_calls: [{ id: `ap-${verb}`, name: "add", arguments: '{"a":2,"b":3}' }] }, { text: "done" }], model);
      const first = await read(await agent.stream("2+3?", { memory: memory(thread()) }));
      const held = first.find((c) => c.type === "tool-call-approval");
      assert.ok(held, first.map((c) => c.type).join(","));
      assert.deepEqual(held.payload.args, { a: 2, b: 3 });
      assert.equal(JSON.parse(held.payload.resumeSchema).required[0], "approved");
      assert.ok(!first.some((c) => c.type === "finish"));
      const params = { runId: held.runId, toolCallId: held.payload.toolCallId };
      const rest = await read(verb === "approve" ? await agent.approveToolCall(params)
                                                 : await agent.declineToolCall({ ...params, reason: "no" }));
      const types = rest.map((c) => c.type);
      assert.equal(types.at(-1), "finish", types.join(","));
      if (verb === "approve") assert.equal(rest.find((c) => c.type === "tool-result").payload.result, 5);
      else assert.equal(rest.find((c) => c.type === "tool-output-denied").payload.approval.reason, "no");
      assert.equal(rest.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join(""), "done");
      await rejects(agent.approveToolCallGenerate(params), 409);
      await rejects(client(KEY_B).getAgent("approver-add").approveToolCallGenerate(params), 403);
    }
  },

  async tools() {
    const listed = await mastra.listTools();
    assert.equal(listed.add.description, "add two numbers");
    assert.deepEqual(Object.keys(JSON.parse((await mastra.getTool("add").details()).inputSchema).properties).sort(), ["a", "b"]);
    assert.equal(await mastra.getTool("add").execute({ data: { a: 2, b: 3 } }), 5);
    assert.equal(await mastra.getAgent(AGENT).executeTool("add", { data: { a: 40, b: 2 } }), 42);
    assert.equal((await mastra.getAgent(AGENT).getTool("add")).id, "add");
    await rejects(mastra.getTool("no-such-tool").execute({ data: {} }), 404);
    await rejects(mastra.getAgent(AGENT).executeTool("no-such-tool", { data: {} }), 404);
    await rejects(mastra.getAgent("no-such-agent").executeTool("add", { data: { a: 1, b: 1 } }), 404);
    await rejects(mastra.getTool("add").execute({ data: { a: "two" } }), 400);
    await rejects(client("not-a-key").getTool("add").execute({ data: { a: 1, b: 1 } }), 401);
  },
};

const name = process.argv[2];
if (!scenarios[name]) {
  console.error(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
await scenarios[name]();
console.log(`ok ${name}`);
