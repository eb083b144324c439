// Node 20 shim: re-export node:fs plus a minimal globSync (only used by `tier-check`).
import fs from 'node:fs'; import path from 'node:path';
export * from 'node:fs'; export default fs;
export const globSync = fs.globSync ?? function (pattern, opts = {}) {
  const cwd = opts.cwd || process.cwd(); const base = pattern.split('/').pop(); const out = [];
  (function walk(d) { for (const e of fs.readdirSync(path.join(cwd, d), { withFileTypes: true })) {
    const rel = d ? path.join(d, e.name) : e.name;
    if (e.isDirectory()) walk(rel); else if (e.name === base) out.push(rel); } })('');
  return out;
};
