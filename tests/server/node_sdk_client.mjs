// The official OpenAI Node SDK against a running `spindle serve`:
//   MESSAGES_JSON=[...] MAX_TOKENS=N node node_sdk_client.mjs BASE_URL MODEL
// prints one JSON object: the models list, a chat answer, the same chat
// streamed (its content deltas joined, the finish reason, whether usage
// came), the same conversation through the Responses API (whole and
// streamed: its text deltas joined, its last event) and the tool call of a
// streamed request when TOOLS_JSON is set.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const messages = JSON.parse(process.env.MESSAGES_JSON);
const max_tokens = Number(process.env.MAX_TOKENS ?? 24);
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const whole = await client.chat.completions.create({ model, messages, max_tokens });
out.whole = { content: whole.choices[0].message.content,
              finish: whole.choices[0].finish_reason, usage: whole.usage };

const stream = await client.chat.completions.create({
  model, messages, max_tokens, stream: true, stream_options: { include_usage: true } });
let content = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    content += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
}
out.stream = { content, finish, usage, chunks };

const resp = await client.responses.create({ model, input: messages, max_output_tokens: max_tokens });
out.responses = { text: resp.output_text, status: resp.status, usage: resp.usage };
const events = await client.responses.create({
  model, input: messages, max_output_tokens: max_tokens, stream: true });
let text = "", last = null;
for await (const ev of events) {
  if (ev.type === "response.output_text.delta") text += ev.delta;
  last = ev.type;
}
out.responses_stream = { text, last };

if (process.env.TOOLS_JSON) {
  const tools = JSON.parse(process.env.TOOLS_JSON);
  const ask = [{ role: "user", content: "What is the weather in Paris?" }];
  const s = await client.chat.completions.create({ model, messages: ask, tools, stream: true });
  const calls = [];
  let toolFinish = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      toolFinish = c.finish_reason ?? toolFinish;
      for (const t of c.delta.tool_calls ?? []) {
        if (!calls[t.index]) calls[t.index] = { id: t.id, name: t.function.name, arguments: "" };
        calls[t.index].arguments += t.function.arguments ?? "";
      }
    }
  }
  out.tools = { calls, finish: toolFinish };
}
console.log(JSON.stringify(out));
