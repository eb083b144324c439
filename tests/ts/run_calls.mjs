// Makes calls through toolgate with the official MCP TypeScript SDK v2, each
// with the client's default callTool and the `_meta` it names (e.g. the
// agent run, `io.toolgate/run`): nothing by hand.
//
// Usage: node run_calls.mjs URL MODE CALLS_JSON
//   MODE:  "2026-07-28" (pinned) or "legacy".
//   CALLS: a JSON list of {"tool": NAME, "arguments": {...}, "meta": {...}}.
//   TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
// Prints one JSON object: {"results": [...]}, where a call that threw gives
// {"threw": MESSAGE} in its place.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode, calls] = process.argv.slice(2);
const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: mode } };
const token = process.env.TOOLGATE_TOKEN;
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : {};
const client = new Client({ name: 'toolgate-tests', version: '1.0.0' }, { versionNegotiation });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
const results = [];
for (const c of JSON.parse(calls)) {
  try {
    results.push(await client.callTool({ name: c.tool, arguments: c.arguments, _meta: c.meta }));
  } catch (e) {
    results.push({ threw: String(e) });
  }
}
await client.close();
console.log(JSON.stringify({ results }));
