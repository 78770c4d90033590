// The JavaScript LangGraph SDK against handrail serve: the seed page's loop, unchanged.
// Usage: node sdk_check.mjs URL TOKEN ; prints one JSON line of what it saw.
import { Client } from "@langchain/langgraph-sdk";

const [url, token] = process.argv.slice(2);
const client = new Client({ apiUrl: url, apiKey: token });
const seen = { events: [], interrupts: [], final: null };

const [assistant] = await client.assistants.search();
const thread = await client.threads.create({ metadata: { from: "js" } });

async function drain(payload) {
  for await (const chunk of client.runs.stream(thread.thread_id, assistant.assistant_id, {
    ...payload,
    streamMode: ["updates", "messages"],
  })) {
    seen.events.push(chunk.event);
    if (chunk.event === "updates" && chunk.data.__interrupt__) seen.interrupts.push(...chunk.data.__interrupt__);
  }
}

await drain({ input: { messages: [{ role: "user", content: "DELETE FROM logs" }] } });
// new Command({resume: {decisions: [...]}}) of the seed sends this command object.
await drain({ command: { resume: { decisions: [{ type: "approve" }] } } });
const state = await client.threads.getState(thread.thread_id);
seen.final = state.values.messages.at(-1).content;
seen.assistant = assistant.assistant_id;
console.log(JSON.stringify(seen));
