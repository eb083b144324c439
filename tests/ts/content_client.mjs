// Reads an MCP server's prompts, resources and completions through toolgate
// with the official MCP TypeScript SDK v2, as its README shows:
// listResources, listResourceTemplates, readResource, listPrompts,
// getPrompt, complete — nothing by hand.
//
// Usage: node content_client.mjs URL MODE STEPS_JSON
//   MODE:  "2026-07-28" (pinned) or "legacy".
//   STEPS: a JSON list, each one of {"read": URI} | {"get": NAME, "arguments": {...}} |
//          {"complete_prompt": NAME, "argument": NAME, "value": TEXT} |
//          {"complete_template": URI_TEMPLATE, "argument": NAME, "value": TEXT}
//   TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
// Prints one JSON object: {"resources", "templates", "prompts", "results"};
// a step that threw gives {"threw": MESSAGE, "code": CODE} in its place.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode, steps] = process.argv.slice(2);
const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: mode } };
const token = process.env.TOOLGATE_TOKEN;
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : {};
const client = new Client({ name: 'toolgate-tests', version: '1.0.0' }, { versionNegotiation });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));

async function step(s) {
  if (s.read) return client.readResource({ uri: s.read });
  if (s.get) return client.getPrompt({ name: s.get, arguments: s.arguments });
  if (s.complete_prompt) return client.complete({ ref: { type: 'ref/prompt', name: s.complete_prompt }, argument: { name: s.argument, value: s.value } });
  return client.complete({ ref: { type: 'ref/resource', uri: s.complete_template }, argument: { name: s.argument, value: s.value } });
}

const resources = (await client.listResources()).resources.map((r) => r.uri);
const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
const results = [];
for (const s of JSON.parse(steps)) {
  try {
    results.push(await step(s));
  } catch (e) {
    results.push({ threw: String(e), code: e.code });
  }
}
await client.close();
console.log(JSON.stringify({ resources, templates, prompts, results }));
