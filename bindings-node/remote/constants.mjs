// dsh-native/remote's shared values: the protocol version and this
// client's name (sent by connect's `initialize` and by every resume's),
// how long an ended transport may take to close, and the token only this
// package's code makes a process or terminal handle with. (The size of a
// write's pieces is write-queue.js's.)

import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { version: PACKAGE_VERSION } = require('../package.json')

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1
/** How this client names itself to the server (for its logs). */
export const CLIENT = { name: 'dsh-native', version: PACKAGE_VERSION }
/**
 * How long a transport gets to answer `initialize` unless `connect` says
 * otherwise: an ssh or kubectl that connects in seconds has ample room (a
 * `docker run` that pulls an image may need Infinity), and one that never
 * answers (a host that drops packets, a prompt nobody sees) ends the wait.
 */
export const CONNECT_TIMEOUT_MS = 120_000
/** How long an ended transport may take to close before it is killed. */
export const CLOSE_LIMIT_MS = 5000

export const HANDLE = Symbol('dsh-native remote handle')
