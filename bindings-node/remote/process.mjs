// dsh-native/remote's RemoteShellProcess: the handle of a background
// process, with the members of NativeShellProcess, over the process's
// mirror (Mirror, in session.mjs) and the server's kill, write_stdin and
// close_stdin.

import { HANDLE } from './constants.mjs'
import { describe, invalid, remoteWriteQueue, stdinClosed } from './wire.mjs'

/** A background process of a remote executor (the seam's ShellProcess); the same members as NativeShellProcess. */
export class RemoteShellProcess {
  #session
  #m

  constructor(token, session, m) {
    if (token !== HANDLE) throw new TypeError('RemoteShellProcess is made by RemoteShellExecutor#start, get, list and listeners')
    this.#session = session
    this.#m = m
    Object.defineProperty(this, 'id', { value: m.id, enumerable: true })
    Object.defineProperty(this, 'command', { value: m.command, enumerable: true })
  }

  get status() {
    return this.#m.status
  }

  get exitCode() {
    return this.#m.exitCode
  }

  get signal() {
    return this.#m.signal
  }

  /** Present (true) once settled when nobody could say how it ended (also when the connection was lost). */
  get exitStatusUnavailable() {
    return this.#m.exitStatusUnavailable || undefined
  }

  get survivors() {
    return this.#m.survivors || undefined
  }

  get done() {
    return this.#m.done
  }

  get sandbox() {
    return this.#m.sandbox
  }

  get limit() {
    return this.#m.limit
  }

  get limitsEnforcement() {
    return this.#m.limitsEnforcement
  }

  get owner() {
    return this.#m.owner
  }

  get hasStdinPipe() {
    return this.#m.hasStdinPipe
  }

  readOutput() {
    return this.#m.read()
  }

  kill() {
    const m = this.#m
    if (m.settled || m.status !== 'running' || m.stopAsked) return false
    m.stopAsked = true
    m.status = 'killed'
    this.#session.fire('kill', { id: m.id })
    return true
  }

  /**
   * Writes `data` (a string as UTF-8, a Buffer or a Uint8Array) to the
   * command's stdin; resolves once the server's bounded buffer took every
   * byte (back-pressure), in 1 MiB messages, writes whole and in call order.
   */
  writeStdin(data) {
    let bytes
    if (typeof data === 'string') bytes = Buffer.from(data, 'utf8')
    else if (Buffer.isBuffer(data)) bytes = data
    else if (data instanceof Uint8Array) bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
    else return Promise.reject(invalid('data', `must be a string, a Buffer or a Uint8Array, got ${describe(data)}`))
    const id = this.#m.id
    const send = (piece) =>
      this.#session.conn.call('write_stdin', { id, data_base64: piece.toString('base64') }).then(
        () => undefined,
        (err) => {
          // A start the server refused, or a process it no longer has: its
          // stdin is gone as a spawn failure's is.
          throw err.code === 'NOT_FOUND' ? stdinClosed(id, 'exited') : err
        },
      )
    return this.#stdin.addBytes(bytes, send)
  }

  // With nothing queued a write is sent at once, so `writeStdin(x);
  // closeStdin()` delivers x (write-queue.js); writes queued behind one lost
  // with a connection are not sent.
  #stdin = remoteWriteQueue('write_stdin', () => this.#m.id)

  closeStdin() {
    const m = this.#m
    if (!m.hasStdinPipe) throw stdinClosed(m.id, 'not-piped')
    if (m.stdinClosed || m.settled) return false
    m.stdinClosed = true
    const close = () => this.#session.fire('close_stdin', { id: m.id })
    if (this.#stdin.idle) close()
    // As locally (index.js): a write made before goes down whole, its later
    // pieces still here reaching the server before the close; a write made
    // after queues behind the close, which refuses it.
    else this.#stdin.add(async () => close())
    return true
  }
}
