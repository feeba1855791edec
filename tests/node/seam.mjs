// The harness's published packages are devDependencies of bindings-node;
// tests live outside it, so bare names are resolved from there (the same
// files the plugin itself imports, so classes are the same instances).
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const fromAddon = createRequire(new URL('../../bindings-node/package.json', import.meta.url))

/** Imports a published package as bindings-node sees it. */
export function seam(name) {
  return import(fromAddon.resolve(name))
}

/** The file URL of a published package's entry, resolved the same way (for a child process to import). */
export function seamUrl(name) {
  return pathToFileURL(fromAddon.resolve(name)).href
}

/** The native plugin (`dsh-native/harness`). */
export const harnessUrl = new URL('../../bindings-node/harness.mjs', import.meta.url).href
