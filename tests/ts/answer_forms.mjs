// Answers through toolgate with the official MCP TypeScript SDK v2, saved
// the way a user saves one: `JSON.stringify` of what callTool, getPrompt or
// readResource resolves to — nothing by hand. The Rust tests prove each
// with `toolgate verify --answer`.
//
// Usage: node answer_forms.mjs URL MODE STEPS_JSON
//   MODE:  "2026-07-28" (pinned) or "legacy".
//   STEPS: a JSON list, each one of {"tool": NAME, "arguments": {...}} |
//          {"prompt": NAME, "arguments": {...}} | {"resource": URI}
//   TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
// Prints one JSON object: {"saved": [TEXT, ...]}, each TEXT what
// JSON.stringify gave, or {"threw": MESSAGE} in its place.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode, steps] = process.argv.slice(2);
const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: mode } };
const token = process.env.TOOLGATE_TOKEN;
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : {};
const client = new Client({ name: 'toolgate-tests', version: '1.0.0' }, { versionNegotiation });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));

async function step(s) {
  if (s.tool) return client.callTool({ name: s.tool, arguments: s.arguments ?? {} });
  if (s.prompt) return client.getPrompt({ name: s.prompt, arguments: s.arguments });
  return client.readResource({ uri: s.resource });
}

const saved = [];
for (const s of JSON.parse(steps)) {
  try {
    saved.push(JSON.stringify(await step(s)));
  } catch (e) {
    saved.push({ threw: String(e) });
  }
}
await client.close();
console.log(JSON.stringify({ saved }));
