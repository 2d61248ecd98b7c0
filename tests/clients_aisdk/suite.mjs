// The Vercel AI SDK (ai 7, unchanged) against the gateway's chat route, as useChat talks to
// @mastra/ai-sdk's chatRoute (decision 136): DefaultChatTransport sends and reconnects,
// readUIMessageStream assembles the UI message.
// Usage: node suite.mjs <scenario>   (tests/clients_aisdk/test_ai_sdk.py runs each scenario)
// Env: GATEWAY_URL, KEY_A (tenant-a's key: one resource), RESOURCE (tenant-a), MODEL_URL (fake model server).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { DefaultChatTransport, readUIMessageStream } from "ai";

const { GATEWAY_URL, KEY_A, MODEL_URL } = process.env;

const transport = (agent) => new DefaultChatTransport({ api: `${GATEWAY_URL}/chat/${agent}`,
  headers: { Authorization: `Bearer ${KEY_A}` } });
const user = (text) => ({ id: randomUUID(), role: "user", parts: [{ type: "text", text }] });

async function script(scripts, model) {
  const r = await fetch(`${MODEL_URL}/_fake/script`, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ scripts, model }) });
  assert.equal(r.status, 200, await r.text());
}

// the chunks as they arrive (tee'd), and the UI message readUIMessageStream built of them
async function read(stream, onData = () => {}, errors = []) {
  const [forChunks, forMessage] = stream.tee();
  const chunks = [];
  const collecting = (async () => { for await (const c of forChunks) chunks.push(c); })();
  let message;
  for await (const m of readUIMessageStream({ stream: forMessage, onError: (e) => errors.push(e) })) message = m;
  await collecting;
  chunks.filter((c) => c.type.startsWith("data-")).forEach(onData);
  return { chunks, message };
}

const send = (agent, chatId, text, extra = {}) => transport(agent).sendMessages({
  chatId, messages: [user(text)], trigger: "submit-message", messageId: undefined, abortSignal: undefined, ...extra });

const types = (chunks) => chunks.map((c) => c.type);

const scenarios = {
  async text() {
    await script([{ text: "Hello from Threadline", reasoning: "thinking it over" }], "threadline-gateway");
    const { chunks, message } = await read(await send("gateway", `ai-${randomUUID().slice(0, 8)}`, "hi"));
    const seen = types(chunks);
    for (const t of ["start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start",
      "text-delta", "text-end", "finish-step", "finish"]) assert.ok(seen.includes(t), `${t} in ${seen}`);
    assert.ok(seen.indexOf("reasoning-start") < seen.indexOf("text-start"), `reasoning before the text: ${seen}`);
    assert.equal(chunks.at(-1).type, "finish");
    assert.equal(chunks.at(-1).finishReason, "stop");
    assert.equal(message.role, "assistant");
    const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    assert.equal(text, "Hello from Threadline");
    const reasoning = message.parts.find((p) => p.type === "reasoning");
    assert.equal(reasoning?.text, "thinking it over");
    assert.ok(message.id, "the message has the start chunk's id");
  },

  async tools() {
    await script([{ tool_calls: [{ name: "data_tool", arguments: { n: 3 }, id: "call-d1", pieces: 2 }] },
      { text: "the tool said 3" }], "threadline-data");
    const data = [];
    const { chunks, message } = await read(await send("data-agent", `ai-${randomUUID().slice(0, 8)}`, "use the tool"),
      (c) => data.push(c));
    const seen = types(chunks);
    for (const t of ["tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available"])
      assert.ok(seen.includes(t), `${t} in ${seen}`);
    const tool = message.parts.find((p) => p.type === "tool-data_tool");
    assert.ok(tool, `a tool part: ${JSON.stringify(message.parts)}`);
    assert.equal(tool.toolCallId, "call-d1");
    assert.equal(tool.state, "output-available");
    assert.deepEqual(tool.input, { n: 3 });
    assert.deepEqual(tool.output, { n: 3 });
    // data parts: data-progress is kept in the message, data-note is transient, data-secret was dropped
    const progress = message.parts.find((p) => p.type === "data-progress");
    assert.deepEqual(progress?.data, { p: 1 });
    assert.ok(!message.parts.some((p) => p.type === "data-note"), "a transient part is not kept");
    assert.ok(data.some((c) => c.type === "data-note" && c.transient === true), "but it is streamed");
    assert.ok(!data.some((c) => c.type === "data-secret"), "the output processor's drop holds");
    assert.equal(message.parts.filter((p) => p.type === "text").map((p) => p.text).join(""), "the tool said 3");
    assert.equal(chunks.filter((c) => c.type === "start-step").length, 2);
  },

  async error() {
    await script([{ status: 400, error: { message: "the model refused", type: "invalid_request_error",
      param: null, code: null } }], "threadline-gateway");
    const errors = [];
    const { chunks } = await read(await send("gateway", `ai-${randomUUID().slice(0, 8)}`, "fail please"), () => {},
      errors);
    const error = chunks.find((c) => c.type === "error");
    assert.ok(error, `an error chunk: ${JSON.stringify(chunks)}`);
    assert.equal(JSON.parse(error.errorText).statusCode, 400);
    assert.match(JSON.parse(error.errorText).message, /the model refused/);
    assert.equal(errors.length, 1, "the reader reports it through onError");
    assert.match(errors[0].message, /the model refused/);
    assert.equal(chunks.at(-1).type, "finish", "the run still finishes");
    assert.equal(chunks.at(-1).finishReason, "error");
    // refusals before a stream: unknown agent, missing credentials, regenerate
    const missing = await fetch(`${GATEWAY_URL}/chat/nobody`, { method: "POST", headers: {
      Authorization: `Bearer ${KEY_A}`, "content-type": "application/json" }, body: JSON.stringify({ id: "x", messages: [user("hi")] }) });
    assert.equal(missing.status, 404);
    await assert.rejects(new DefaultChatTransport({ api: `${GATEWAY_URL}/chat/gateway` }).sendMessages({
      chatId: "x", messages: [user("hi")], trigger: "submit-message" }), /valid API key or token/);
  },

  async resume() {
    const words = Array.from({ length: 30 }, (_, i) => `w${i} `);
    await script([{ chunks: words, chunk_delay: 0.1 }], "threadline-gateway");
    const chatId = `ai-${randomUUID().slice(0, 8)}`;
    const first = await send("gateway", chatId, "a long answer please");
    const reader = first.getReader();
    const early = [];
    while (!early.some((c) => c.type === "text-delta")) early.push((await reader.read()).value);
    await reader.cancel();  // the page went away mid-answer
    const resumed = await transport("gateway").reconnectToStream({ chatId });
    assert.ok(resumed, "an active run: a stream to resume, not 204");
    const { chunks, message } = await read(resumed);
    assert.equal(chunks[0].type, "start");
    assert.equal(chunks.at(-1).type, "finish");
    assert.equal(message.parts.filter((p) => p.type === "text").map((p) => p.text).join(""), words.join(""));
    // the run is over (its lease goes a moment after its finish): 204, which the transport reads as null
    let after = await transport("gateway").reconnectToStream({ chatId });
    for (let i = 0; after !== null && i < 50; i++) {
      await after.cancel();
      await new Promise((r) => setTimeout(r, 100));
      after = await transport("gateway").reconnectToStream({ chatId });
    }
    assert.equal(after, null, "no active run: 204");
  },
};

const name = process.argv[2];
if (!scenarios[name]) throw new Error(`unknown scenario ${name}`);
await scenarios[name]();
console.log(`ok ${name}`);
