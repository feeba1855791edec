// The harness's published packages are devDependencies of bindings-node;
// tests live outside it, so bare names are resolved from there (the same
// files the plugin itself imports, so classes are the same instances).
import { createRequire } from 'node:module'

const fromAddon = createRequire(new URL('../../bindings-node/package.json', import.meta.url))

/** Imports a published package as bindings-node sees it. */
export function seam(name) {
  return import(fromAddon.resolve(name))
}
