export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL && context.parentURL.includes('@modelcontextprotocol/conformance/dist/'))
    return { url: new URL('./fs-shim.mjs', import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
