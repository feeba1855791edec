// dsh-native/remote's terminal sessions, the server's `terminal_*`
// methods: a handle (RemoteTerminalHandle) reads the output by long-poll,
// one read in flight, into what `readOutput()` and the `output` stream
// share (TerminalMirror), and stops asking while the stream's buffer is
// full or the server's `max_output_bytes` wait unread here (the server then
// holds the rest and the program waits, as a local session's does).

import { Readable } from 'node:stream'
import { createRequire } from 'node:module'
import { HANDLE } from './constants.mjs'
import {
  describe,
  invalid,
  coded,
  refused,
  remoteWriteQueue,
  INPUT_GONE,
  NO_FOREGROUND,
  RESIZE_AFTER_EXIT,
  TERMINAL_SIGNALS,
  dimensionProblem,
  quoted,
  isObject,
} from './wire.mjs'

const { WRITE_PIECE } = createRequire(import.meta.url)('../write-queue.js')

/**
 * A terminal_read's wait, past what any clock can count: the server
 * answers once there is output or the output has ended, never with an
 * empty timeout, so a silent program costs no traffic.
 */
const LONG_POLL_MS = 1e30

/**
 * One terminal session as the client knows it. Its output is read by
 * long-poll (`terminal_read`, one in flight at a time) into `unread`, which
 * `readOutput()` and the `output` stream take from, as the core's buffer
 * is shared locally. Reading stops while the stream's buffer is full or
 * `unread` holds the server's `max_output_bytes`: the server then keeps
 * what the program prints, up to its own bound, and the program waits, as
 * a local session's does.
 */
export class TerminalMirror {
  /** Exit facts (from `terminal_exit`, a snapshot, or a lost connection). */
  exited = false
  exitCode = null
  signal = null
  exitStatusUnavailable = false
  survivors = 0
  /** Text read from the server that nobody took yet, in pieces, and its UTF-8 size. */
  unread = []
  unreadBytes = 0
  /** The server said the output has ended (or the connection did). */
  outputEnded = false
  /** The spawn was answered: the server knows the id, reads may start. */
  spawned = false
  reading = false
  /** The stream asked for data (`_read`) and has had none since. */
  wanting = false
  /** The stream's last push found its buffer full: no more reads until it asks again. */
  streamFull = false
  streamEnded = false
  /** Read to the end whatever the bounds (terminate and dispose: the rest is small and final). */
  draining = false
  /** terminate() completed: the session is over. */
  terminated = false
  /** The connection was lost (not closed by dispose): calls say so from now on. */
  lostHere = false
  /** This terminal keeps the event loop alive (as a local one does while its program runs). */
  held = true
  handle
  done
  #resolveDone
  ended
  #resolveEnded

  constructor(session, id, bound) {
    this.session = session
    this.id = id
    this.bound = bound
    this.done = new Promise((resolve) => (this.#resolveDone = resolve))
    this.ended = new Promise((resolve) => (this.#resolveEnded = resolve))
    this.output = new Readable({
      read: () => {
        this.wanting = true
        this.streamFull = false
        this.deliver()
        this.pump()
      },
    })
    session.conn.hold(1)
  }

  /** A terminal snapshot of the server's: the pid, and the exit once it happened. */
  apply(t) {
    if (!isObject(t)) return
    if (typeof t.survivors === 'number' && t.survivors > this.survivors) this.survivors = t.survivors
    if (t.exited === true && !this.exited) {
      this.exit(t.exit_code ?? null, t.signal ?? null, t.exit_status_unavailable === true)
    }
  }

  exit(exitCode, signal, unavailable) {
    if (this.exited) return
    this.exited = true
    this.exitCode = exitCode
    this.signal = signal
    this.exitStatusUnavailable = unavailable
    this.release()
    this.#resolveDone({ exitCode, signal })
  }

  release() {
    if (!this.held) return
    this.held = false
    this.session.conn.hold(-1)
  }

  /** Everything unread, taken. */
  take() {
    const text = this.unread.length === 1 ? this.unread[0] : this.unread.join('')
    this.unread = []
    this.unreadBytes = 0
    return text
  }

  /** The consuming read of the local face: what arrived, and whether the output has ended with it. */
  read() {
    const read = { text: this.take(), ended: this.outputEnded }
    // Room was made: reading may go on.
    this.pump()
    return read
  }

  endOutput() {
    this.outputEnded = true
    this.#resolveEnded()
    this.deliver()
  }

  /** Feeds the stream what it asked for, and its end once everything was delivered. */
  deliver() {
    const out = this.output
    if (!this.wanting || this.streamEnded || out.destroyed) return
    if (this.unread.length > 0) {
      this.wanting = false
      if (!out.push(Buffer.from(this.take(), 'utf8'))) this.streamFull = true
    } else if (this.outputEnded) {
      this.wanting = false
      this.streamEnded = true
      out.push(null)
    }
  }

  /** Keeps one long-poll read in flight while the output is wanted. */
  pump() {
    const conn = this.session.conn
    if (this.reading || this.outputEnded || !this.spawned || conn.lostReason !== undefined) return
    if (!this.draining && (this.streamFull || this.unreadBytes >= this.bound)) return
    this.reading = true
    conn.call('terminal_read', { id: this.id, wait_ms: LONG_POLL_MS }).then(
      (r) => {
        this.reading = false
        if (typeof r.text === 'string' && r.text !== '') {
          this.unread.push(r.text)
          this.unreadBytes += Buffer.byteLength(r.text)
        }
        if (r.ended === true) this.endOutput()
        else this.deliver()
        this.pump()
      },
      (err) => {
        this.reading = false
        // A lost connection ends the output itself (Session#lost).
        if (err.code === 'CONNECTION_LOST') return
        if (err.code === 'ANSWER_LOST') {
          // What that read took from the server was lost with the
          // connection (a terminal's output has no offsets to read again
          // from): said, and reading goes on.
          process.emitWarning(`dsh-native/remote: output of terminal ${this.id} may be missing: ${err.message}`, 'DshRemoteWarning')
          this.pump()
          return
        }
        // Anything else would fail again on every ask: the output ends here.
        process.emitWarning(err, 'DshRemoteWarning')
        this.endOutput()
      },
    )
  }

  /** Reads what the server still holds to the end, whatever the bounds; resolves once the output has ended. */
  drain() {
    this.draining = true
    this.pump()
    return this.ended
  }

  /** The connection ended: nobody can say how the program ended, and no more output will come. */
  lost(disposed) {
    if (!disposed) this.lostHere = true
    this.held = false
    this.exit(null, null, true)
    this.endOutput()
  }

  /** A spawn the server refused or never answered: this side forgets it. */
  abandon() {
    this.release()
    this.outputEnded = true
    this.#resolveEnded()
    this.output.destroy()
  }
}

/**
 * A terminal session on the server (docs/terminals.md): the members of
 * NativeTerminalHandle, over the `terminal_*` methods. `output` and
 * `readOutput()` take from the same unread output, read ahead by
 * long-poll (bounded: see TerminalMirror).
 */
export class RemoteTerminalHandle {
  #session
  #m
  #terminating
  /** Calls in flight, which terminate() waits for (as locally). */
  #inflight = new Set()
  /**
   * Writes in call order (write-queue.js); those queued behind one lost
   * with a connection are not sent: they would arrive out of order.
   */
  #writes = remoteWriteQueue('terminal_write', () => this.#m.id)

  constructor(token, session, m, pid) {
    if (token !== HANDLE) throw new TypeError('RemoteTerminalHandle is made by RemoteShellExecutor#spawnTerminal')
    this.#session = session
    this.#m = m
    Object.defineProperty(this, 'pid', { value: pid, enumerable: true })
    Object.defineProperty(this, 'output', { value: m.output, enumerable: true })
  }

  /** Resolves with `{ exitCode, signal }` when the program exits (both null when the connection was lost); never rejects. */
  get done() {
    return this.#m.done
  }

  get exited() {
    return this.#m.exited
  }

  /** Present (true) once exited when nobody could say how it ended (also when the connection was lost). */
  get exitStatusUnavailable() {
    return this.#m.exitStatusUnavailable || undefined
  }

  get survivors() {
    return this.#m.survivors || undefined
  }

  readOutput() {
    return this.#m.read()
  }

  /**
   * What a call can be answered with here, without the server: after a
   * lost connection, its error; `ifExited` once the program is known to
   * have exited (what the server would answer, and all there is to say
   * after dispose). Undefined: ask the server.
   */
  #known(ifExited) {
    const m = this.#m
    if (m.lostHere) return { error: this.#session.conn.lostError() }
    if (m.exited) return ifExited
    if (this.#session.conn.lostReason !== undefined) return { error: this.#session.conn.lostError() }
    return undefined
  }

  #track(p) {
    this.#inflight.add(p)
    const forget = () => this.#inflight.delete(p)
    p.then(forget, forget)
    return p
  }

  #answer(known, ask) {
    if (known !== undefined) return this.#track('error' in known ? Promise.reject(known.error) : Promise.resolve(known.value))
    return this.#track(ask())
  }

  /**
   * Types `data` (a string as UTF-8, a Buffer or any byte view) into the
   * terminal; resolves once the terminal took every byte. Writes are whole
   * and in call order; one past WRITE_PIECE goes in pieces, each sent once
   * the previous was taken.
   */
  write(data) {
    let payload
    if (typeof data === 'string') payload = data
    else if (ArrayBuffer.isView(data)) payload = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
    else return this.#track(Promise.reject(refused('terminal.data', `must be a string or a Buffer, got ${describe(data)}`)))
    const m = this.#m
    const conn = this.#session.conn
    const send = async () => {
      // Checked when its turn comes: a write queued behind one the exit
      // refused is refused too, as locally.
      const known = this.#known({ error: coded('TERMINAL_CLOSED', INPUT_GONE) })
      if (known !== undefined) throw known.error
      const id = m.id
      if (typeof payload === 'string' && (payload.length * 3 <= WRITE_PIECE || Buffer.byteLength(payload) <= WRITE_PIECE)) {
        await conn.call('terminal_write', { id, data: payload })
        return
      }
      const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload
      for (let at = 0; at < bytes.length || at === 0; at += WRITE_PIECE) {
        await conn.call('terminal_write', { id, data_base64: bytes.subarray(at, at + WRITE_PIECE).toString('base64') })
      }
    }
    // With nothing queued it is sent at once, so a write and the call after
    // it reach the server in that order.
    return this.#track(this.#writes.add(send))
  }

  /**
   * Changes the window size. Checked here by the core's rules, and sent;
   * a refusal the server sends afterwards cannot be thrown: TERMINAL_CLOSED
   * (the session ended meanwhile) and CONNECTION_LOST (which `done` and
   * `output` report) change nothing, anything else is a process warning
   * (DshRemoteWarning).
   */
  resize(rows, cols) {
    if (typeof rows !== 'number') throw refused('terminal.rows', `must be a number, got ${describe(rows)}`)
    if (typeof cols !== 'number') throw refused('terminal.cols', `must be a number, got ${describe(cols)}`)
    const rowsProblem = dimensionProblem(rows)
    if (rowsProblem) throw refused('terminal.rows', rowsProblem)
    const colsProblem = dimensionProblem(cols)
    if (colsProblem) throw refused('terminal.cols', colsProblem)
    const m = this.#m
    const s = this.#session
    if (m.lostHere) throw s.conn.lostError()
    // Refused once the program exited, as the server would (a resize sent
    // before the client learnt of the exit is refused there, silently).
    if (m.terminated || m.exited) throw coded('TERMINAL_CLOSED', RESIZE_AFTER_EXIT)
    s.conn.call('terminal_resize', { id: m.id, rows, cols }).catch((err) => {
      if (err.code !== 'TERMINAL_CLOSED' && err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
    })
  }

  inspectForeground() {
    const m = this.#m
    return this.#answer(this.#known({ value: undefined }), async () => {
      const { foreground } = await this.#session.conn.call('terminal_inspect_foreground', { id: m.id })
      return isObject(foreground) ? { processGroupId: foreground.process_group_id, inputWaiting: foreground.input_waiting } : undefined
    })
  }

  /** Resolves with true once the foreground group waits for input; false when `timeoutMs` passed or the program exited. */
  waitInputWaiting(timeoutMs) {
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))) {
      return Promise.reject(invalid('timeoutMs', `must be a non-negative number of milliseconds or undefined, got ${typeof timeoutMs === 'number' ? timeoutMs : describe(timeoutMs)}`))
    }
    const params = { id: this.#m.id }
    // Infinity: no limit, as undefined.
    if (timeoutMs !== undefined && timeoutMs !== Infinity) params.timeout_ms = timeoutMs
    return this.#answer(this.#known({ value: false }), async () => (await this.#session.conn.call('terminal_wait_input_waiting', params)).waiting)
  }

  signalForeground(signal) {
    if (typeof signal !== 'string') return this.#track(Promise.reject(refused('terminal.signal', `must be a string, got ${describe(signal)}`)))
    if (!TERMINAL_SIGNALS.includes(signal)) {
      return this.#track(Promise.reject(refused('terminal.signal', `must be one of ${TERMINAL_SIGNALS.join(', ')}, got ${quoted(signal)}`)))
    }
    return this.#answer(
      this.#known({ error: coded('TERMINAL_CLOSED', NO_FOREGROUND) }),
      async () => (await this.#session.conn.call('terminal_signal_foreground', { id: this.#m.id, signal })).process_group_id,
    )
  }

  /**
   * Ends every member of the session; resolves once nothing is left, the
   * output was read to its end (so `readOutput()` then returns the rest
   * with `ended`), and no call of this handle is in flight. Idempotent.
   * Once the executor's dispose began, it waits for the dispose (which
   * ends every session); after a lost connection it rejects with
   * CONNECTION_LOST.
   */
  terminate() {
    this.#terminating ??= this.#terminate()
    return this.#terminating
  }

  async #terminate() {
    const m = this.#m
    const s = this.#session
    if (m.lostHere) throw s.conn.lostError()
    if (s.disposed) {
      // The dispose ends every session and reads what they left.
      await s.disposal?.catch(() => {})
    } else {
      const { survivors } = await s.conn.call('terminal_terminate', { id: m.id })
      if (survivors > m.survivors) m.survivors = survivors
      // Its terminal_exit may still be on the way: the exit facts are
      // asked for, so `exited` holds once this resolves, as locally.
      if (!m.exited) m.apply((await s.conn.call('terminal_wait', { id: m.id })).terminal)
      await m.drain()
    }
    m.terminated = true
    await Promise.allSettled([...this.#inflight])
  }
}
