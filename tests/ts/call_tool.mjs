// Calls one tool through toolgate with the official MCP TypeScript SDK v2,
// as its README shows: connect, then callTool — nothing by hand.
//
// Usage: node call_tool.mjs URL MODE TOOL ARGUMENTS_JSON [TIMES]
//   MODE: "2026-07-28" (pinned), "legacy" or "auto".
//   TOOLGATE_TOKEN, when set, is sent as `Authorization: Bearer`.
// Prints one JSON object: {"results": [...]}, where a call that threw gives
// {"threw": MESSAGE} in its place (the tests assert none does).
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode, tool, args, times = '1'] = process.argv.slice(2);
const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : mode === 'auto' ? { mode: 'auto' } : { mode: { pin: mode } };
const token = process.env.TOOLGATE_TOKEN;
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : {};
const client = new Client({ name: 'toolgate-tests', version: '1.0.0' }, { versionNegotiation });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
const results = [];
for (let i = 0; i < Number(times); i++) {
  try {
    results.push(await client.callTool({ name: tool, arguments: JSON.parse(args) }));
  } catch (e) {
    results.push({ threw: String(e) });
  }
}
await client.close();
console.log(JSON.stringify({ results }));
