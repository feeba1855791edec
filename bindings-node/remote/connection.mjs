// dsh-native/remote's connection: one start of a transport (a spawned
// program or a unix socket: TransportLink) and the JSON-RPC session over
// it (Connection): requests answered by id, notifications handed on.
//
// Against a server that keeps sessions (`--linger`), a transport that drops
// is started again and the session resumed (Connection#reconnect): calls
// wait meanwhile, those the server no longer owes are sent again when they
// only read (READING_METHODS) or fail with ANSWER_LOST, and the mirrors are
// brought back in line by offset (Session#resumed, in session.mjs).

import { spawn } from 'node:child_process'
import net from 'node:net'
import { PROTOCOL_VERSION, CLIENT, CLOSE_LIMIT_MS } from './constants.mjs'
import { coded, fromRpcError, isObject, wellFormed } from './wire.mjs'

/** How much of a command transport's stderr is kept for error messages. */
const STDERR_TAIL = 4096
/**
 * The longest message the server reads (the protocol's limit); a longer one
 * would be answered with an error that names no request, so it is refused
 * here instead.
 */
const MAX_MESSAGE_BYTES = 48 << 20
/** How long a transport program that exited (or closed its output) may take to close the rest. */
const LINGER_MS = 1000
/** The pause before the first attempt to resume a dropped session; doubled after each failed one, up to RECONNECT_MAX_MS. */
const RECONNECT_FIRST_MS = 100
const RECONNECT_MAX_MS = 2000
/**
 * The methods that only read. One whose answer was lost with a dropped
 * connection is sent again once the session is resumed (asking twice
 * changes nothing); any other may have taken effect, and fails with
 * ANSWER_LOST. (`terminal_read` consumes what it returns: not one.)
 */
const READING_METHODS = new Set([
  'resolve',
  'get',
  'list',
  'owner_of',
  'read_from',
  'wait',
  'terminal_get',
  'terminal_wait',
  'terminal_inspect_foreground',
  'terminal_wait_input_waiting',
])

/**
 * One start of a transport: a spawned program (its stdin and stdout carry
 * the protocol, its stderr is handed on for messages) or a connected unix
 * socket, until it ends. A connection has one at a time; a session resumed
 * after a drop goes on over a new one.
 */
class TransportLink {
  /** Resolves once the link is up (spawned, or connected); rejects with why when it ended before. */
  ready
  #failReady
  #onEnd
  #handles = []
  #over = false
  #closed
  #setClosed
  #write
  #end

  /** `onData(chunk)`, `onStderr(text)`, and `onEnd(why)` once, however it ended (also before it was up). */
  constructor(transport, { onData, onStderr, onEnd }) {
    this.#onEnd = onEnd
    this.#closed = new Promise((resolve) => (this.#setClosed = resolve))
    let up
    let failed
    this.ready = new Promise((resolve, reject) => {
      up = resolve
      failed = reject
    })
    // A link that ends before it is up fails `ready` (only then: once up, a rejection changes nothing).
    this.ready.catch(() => {})
    this.#failReady = (why) => failed(new Error(why))
    if (transport.command) this.#spawn(transport.command, up, onData, onStderr)
    else this.#connect(transport.socket, up, onData)
  }

  #spawn([program, ...args], up, onData, onStderr) {
    let child
    try {
      // In the host's own session and process group, as node's children
      // are: an ssh can ask at the terminal (a host key, a passphrase),
      // and a Ctrl-C or hangup of the host's group reaches it too.
      child = spawn(program, args, { stdio: ['pipe', 'pipe', 'pipe'] })
    } catch (err) {
      // Refused before any process (a NUL byte in an argument); told
      // after the constructor, as any other end is.
      queueMicrotask(() => this.#ended(`it could not be started: ${err.message}`))
      return
    }
    let why
    child.once('spawn', up)
    child.on('error', (err) => {
      why ??= `it could not be started: ${err.message}`
      // A spawn failure may emit no close: end here.
      if (child.pid === undefined) this.#ended(why)
    })
    // 'close' waits for its stdout to close too, which a process it left
    // behind may hold: an exit, or an output that ended, is the end soon
    // after (what was already written is read meanwhile).
    const endSoon = (what) => {
      const timer = setTimeout(() => {
        why ??= what
        this.#ended(why)
        child.kill('SIGKILL')
      }, LINGER_MS)
      timer.unref()
    }
    child.on('exit', (code, signal) => {
      why ??= signal ? `it was killed by ${signal}` : `it exited with status ${code}`
      endSoon(why)
    })
    child.stdout.on('end', () => endSoon('it closed its stdout'))
    child.stdin.on('error', () => {
      // EPIPE: the server is gone, which its close reports.
    })
    child.stdout.on('data', (chunk) => {
      if (!this.#over) onData(chunk)
    })
    child.stderr.setEncoding('utf8')
    child.stderr.on('data', onStderr)
    child.on('close', (code, signal) => {
      why ??= signal ? `it was killed by ${signal}` : `it exited with status ${code}`
      this.#ended(why)
    })
    this.#write = (line) => child.stdin.write(line)
    this.#end = () => {
      child.stdin.end()
      this.#killAfter(CLOSE_LIMIT_MS)
    }
    this.#handles = [child, child.stdin, child.stdout, child.stderr]
  }

  #connect(path, up, onData) {
    const socket = net.connect({ path })
    let why
    socket.once('connect', up)
    socket.on('error', (err) => {
      why ??= err.message
    })
    socket.on('data', (chunk) => {
      if (!this.#over) onData(chunk)
    })
    socket.on('close', () => this.#ended(why ?? 'the server closed it'))
    this.#write = (line) => socket.write(line)
    this.#end = () => {
      socket.end()
      this.#killAfter(CLOSE_LIMIT_MS)
    }
    this.#handles = [socket]
  }

  write(line) {
    if (!this.#over) this.#write(line)
  }

  /** Ends the far side's input (the server then ends or keeps the session), and the link once it closes (at most CLOSE_LIMIT_MS later). */
  end() {
    if (this.#over) return
    this.#end()
  }

  /** Ends the link now, for `why`: nothing more is read or written, and a program is killed. */
  destroy(why = 'this client ended it') {
    this.#ended(why)
    for (const h of this.#handles) h.destroy?.()
    this.#handles[0]?.kill?.('SIGKILL')
  }

  /** Whether the link keeps the event loop alive. */
  setRef(ref) {
    for (const h of this.#handles) (ref ? h.ref : h.unref)?.call(h)
  }

  #killAfter(ms) {
    const timer = setTimeout(() => this.destroy(`it did not close within ${ms} ms`), ms)
    timer.unref()
    this.#closed.then(() => clearTimeout(timer))
  }

  #ended(why) {
    if (this.#over) return
    this.#over = true
    this.#failReady(why)
    this.#setClosed()
    this.#onEnd(why)
  }
}

/**
 * One JSON-RPC session over a transport: requests answered by id,
 * notifications handed on, and one end. When the transport ends unasked,
 * every pending call fails with CONNECTION_LOST naming the transport and,
 * for a command, the tail of its stderr, unless the session may be
 * resumed (`resumeWith`): the transport is then started again and the
 * session taken over (`initialize {resume}`), while calls wait.
 */
export class Connection {
  /** The transport's words, for errors. */
  label
  /** Set once the connection is over: the reason, for every later call. */
  lostReason
  onNotification = () => {}
  onLost = () => {}
  /** The session was resumed over a new link: what the mirrors missed is asked for again. */
  onResumed = () => {}
  /** How long a resume attempt may go unanswered before it is ended and tried again (connect's `connectTimeoutMs`; Infinity: until the deadline). */
  connectTimeoutMs = Infinity
  #transport
  /** The transport as now started; undefined between a drop and the next attempt. */
  #link
  /** id → the call awaiting its answer: `{ method, line, sent, resolve, reject }`. */
  #pending = new Map()
  /** Messages made while reconnecting, written in order once the session is resumed. */
  #unsent = []
  #nextId = 0
  #holds = 0
  #chunks = []
  #stderr = ''
  #opening = true
  #closing = false
  #closed
  #setClosed
  /** What resumes the session (`{ token, lingerMs }`), when it may be resumed. */
  #resume
  /**
   * While the transport is started again: why it dropped (`drop`), the
   * `deadline`, the `pause` between attempts and the attempt's time `limit`
   * (timers), whether the limit cut the attempt short, what ends the pause
   * early (`wake`), and the attempt's `initialize {resume}` call while it
   * waits for its answer (`resumeCall`, `{ id, resolve, reject }`: not a
   * pending call, which would keep the event loop alive by itself).
   */
  #reconnecting

  /** Opens `transport`; resolves once the stream is up (spawned, or connected). */
  static async open(transport) {
    const conn = new Connection(transport)
    const link = conn.#startLink()
    try {
      await link.ready
    } catch {
      // The link's end made the connection lost, with why.
      throw conn.lostError()
    }
    conn.#opening = false
    conn.#updateRef()
    return conn
  }

  constructor(transport) {
    this.#transport = transport
    this.label = transport.label
    this.#closed = new Promise((resolve) => (this.#setClosed = resolve))
  }

  /** A new link of the transport, the connection's from now on. */
  #startLink() {
    const link = new TransportLink(this.#transport, {
      onData: (chunk) => this.#data(chunk),
      onStderr: (text) => {
        this.#stderr = (this.#stderr + text).slice(-STDERR_TAIL)
      },
      onEnd: (why) => {
        if (this.#link === link) this.#linkEnded(why)
      },
    })
    this.#link = link
    this.#updateRef()
    return link
  }

  /**
   * From now on a transport that ends unasked is started again and the
   * session resumed (`session`: initialize's answer's), until its linger
   * time has passed.
   */
  resumeWith(session) {
    this.#resume = { token: session.token, lingerMs: session.linger_ms }
  }

  /** Keeps the event loop alive while `n` more things wait on the server (negative: fewer). */
  hold(n) {
    if (this.lostReason !== undefined) return
    this.#holds += n
    this.#updateRef()
  }

  #updateRef() {
    // Like a local executor: an idle connection does not keep Node running;
    // opening it, a call in flight or a running process does, also while
    // it is being resumed.
    const ref = this.lostReason === undefined && (this.#opening || this.#closing || this.#holds > 0 || this.#pending.size > 0)
    this.#link?.setRef(ref)
    const r = this.#reconnecting
    for (const timer of [r?.pause, r?.limit]) {
      if (timer !== undefined) (ref ? timer.ref : timer.unref).call(timer)
    }
  }

  /** A request; resolves with its result, rejects with the server's error as the local face makes it. */
  call(method, params) {
    let send
    try {
      send = this.prepare(method, params)
    } catch (err) {
      return Promise.reject(err)
    }
    return send()
  }

  /**
   * A request made ready to send: what cannot be sent (a lost connection,
   * a message past the server's limit) throws now, for a caller that must
   * fail synchronously; `send()` then writes it and returns its answer.
   */
  prepare(method, params) {
    if (this.lostReason !== undefined) throw this.lostError()
    const id = ++this.#nextId
    const line = `${JSON.stringify({ jsonrpc: '2.0', id, method, params }, wellFormed)}\n`
    // Bytes are at most 3 per UTF-16 unit: most lines need no count.
    if (line.length * 3 > MAX_MESSAGE_BYTES && Buffer.byteLength(line) > MAX_MESSAGE_BYTES) {
      throw coded(
        'MESSAGE_TOO_LARGE',
        `dsh-native/remote: the ${method} call is ${Buffer.byteLength(line)} bytes as a protocol message, more than the ${MAX_MESSAGE_BYTES} one message may hold (a stdin that large can be written to a stdin pipe instead)`,
      )
    }
    // Written before send() returns (or queued in order while reconnecting),
    // so calls reach the server in call order.
    return () => {
      if (this.lostReason !== undefined) return Promise.reject(this.lostError())
      return new Promise((resolve, reject) => {
        this.#pending.set(id, { method, line, sent: this.#reconnecting === undefined, resolve, reject })
        this.#updateRef()
        this.#write(line)
      })
    }
  }

  /** A notification: nothing answers it, not even an error. */
  notify(method, params) {
    if (this.lostReason !== undefined) return
    this.#write(`${JSON.stringify({ jsonrpc: '2.0', method, params }, wellFormed)}\n`)
  }

  #write(line) {
    if (this.#reconnecting !== undefined) this.#unsent.push(line)
    else this.#link.write(line)
  }

  /** A fresh CONNECTION_LOST error (each caller gets its own stack). */
  lostError() {
    const tail = this.#stderr.trim()
    const stderr = tail ? `; its stderr ended with: ${tail}` : ''
    return coded('CONNECTION_LOST', `dsh-native/remote: the connection to ${this.label} was lost: ${this.lostReason}${stderr}`, { transport: this.label })
  }

  /** The error of a call whose answer was lost with a dropped connection, the session resumed since. */
  #answerLost(method, drop) {
    return coded(
      'ANSWER_LOST',
      `dsh-native/remote: the connection to ${this.label} dropped (${drop}) before the answer to ${method} came; the session was resumed, but the call may have taken effect`,
      { transport: this.label },
    )
  }

  /**
   * Ends the stream (the server then disposes what it still has) and
   * resolves once it is closed. While reconnecting, the reconnection stops:
   * the server's session then ends with its linger time.
   */
  close() {
    this.#closing = true
    this.#updateRef()
    if (this.#reconnecting !== undefined) {
      this.#reconnecting.wake()
      this.#link?.destroy()
    } else if (this.lostReason === undefined) {
      this.#link.end()
    }
    return this.#closed
  }

  #data(chunk) {
    let start = 0
    for (;;) {
      const nl = chunk.indexOf(10, start)
      if (nl < 0) {
        if (start < chunk.length) this.#chunks.push(chunk.subarray(start))
        return
      }
      let line = chunk.subarray(start, nl)
      if (this.#chunks.length > 0) {
        this.#chunks.push(line)
        line = Buffer.concat(this.#chunks)
        this.#chunks = []
      }
      start = nl + 1
      if (line.length > 0) this.#line(line)
      if (this.lostReason !== undefined) return
    }
  }

  #line(bytes) {
    let message
    try {
      message = JSON.parse(bytes.toString('utf8'))
    } catch {
      return this.#broken(`the server sent a line that is not JSON: ${JSON.stringify(bytes.toString('utf8').slice(0, 200))}`)
    }
    if (!isObject(message)) return this.#broken(`the server sent ${JSON.stringify(message)}, not a message`)
    if (typeof message.method === 'string' && message.id === undefined) {
      try {
        this.onNotification(message.method, message.params ?? {})
      } catch (err) {
        process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'DshRemoteWarning')
      }
      return
    }
    const resume = this.#reconnecting?.resumeCall
    const pending = resume?.id === message.id ? resume : this.#pending.get(message.id)
    if (pending === undefined) {
      // An answer to no request of ours: the server could not read one
      // (id null), so a call would wait forever. Nothing can be trusted now.
      const what = message.error ? `the error ${JSON.stringify(message.error)}` : `an answer to request ${JSON.stringify(message.id)}, which this client never sent`
      return this.#broken(`the server sent ${what}`)
    }
    if (pending === resume) this.#reconnecting.resumeCall = undefined
    else this.#pending.delete(message.id)
    this.#updateRef()
    if (message.error !== undefined) pending.reject(fromRpcError(message.error))
    else pending.resolve(message.result)
  }

  /** Ends the connection now, for `why` (no answer in time, a broken protocol): every pending call fails with CONNECTION_LOST saying why, and the transport's program is killed. */
  abort(why) {
    const link = this.#link
    this.#ended(why)
    link?.destroy(why)
  }

  /** The server broke the protocol: the stream is ended and treated as lost (a resume would not mend it). */
  #broken(why) {
    this.abort(`${why}; the connection was closed`)
  }

  /** The link ended: the connection is over, or the session is resumed over a new one. */
  #linkEnded(why) {
    this.#link = undefined
    // A line cut short by the end is no message.
    this.#chunks = []
    const r = this.#reconnecting
    if (r !== undefined) {
      // An attempt's link: the attempt fails (its resume call gets no answer).
      const resume = r.resumeCall
      r.resumeCall = undefined
      resume?.reject(new Error(why))
      return
    }
    // Resumable once initialize gave a token (resumeWith), unless closing.
    if (this.#closing || this.#resume === undefined) this.#ended(why)
    else this.#reconnect(why)
  }

  /**
   * Starts the transport again and resumes the session, after a pause of
   * RECONNECT_FIRST_MS doubled after each failed attempt up to
   * RECONNECT_MAX_MS, until the session's linger time has passed since the
   * drop (the server has disposed it then). Meanwhile calls wait. Gives up
   * at once when the transport's program cannot be started or the server
   * refuses the token; the connection is then lost as a transport without
   * a session is.
   */
  async #reconnect(drop) {
    const { lingerMs } = this.#resume
    const r = { drop, deadline: performance.now() + lingerMs, pause: undefined, limit: undefined, cutShort: false, wake: () => {}, resumeCall: undefined }
    this.#reconnecting = r
    let delay = RECONNECT_FIRST_MS
    // Why the last attempt failed; one the deadline cut short says less
    // than the one before it.
    let failure
    let final = false
    while (!this.#closing && this.lostReason === undefined) {
      const wait = Math.min(delay, r.deadline - performance.now())
      if (wait <= 0) break
      await new Promise((resolve) => {
        r.wake = resolve
        r.pause = setTimeout(resolve, wait)
        this.#updateRef()
      })
      clearTimeout(r.pause)
      r.pause = undefined
      if (this.#closing || this.lostReason !== undefined) break
      try {
        await this.#attempt(r)
        return
      } catch (err) {
        if (failure === undefined || !r.cutShort) failure = err.message
        final = err.final === true
        if (final) break
      }
      delay = Math.min(delay * 2, RECONNECT_MAX_MS)
    }
    this.#reconnecting = undefined
    this.#ended(
      final
        ? `${drop}, and the session could not be resumed: ${failure}`
        : `${drop}, and the session could not be resumed within its ${lingerMs} ms linger time (the last attempt: ${failure ?? 'none was made'})`,
    )
  }

  /** One attempt: a new link, and `initialize {resume}` over it; resolves once the session is resumed. */
  async #attempt(r) {
    const link = this.#startLink()
    // An attempt that hangs (an ssh that never connects) ends at the
    // connect timeout, to be tried again, or at the deadline.
    r.cutShort = false
    const left = Math.max(0, r.deadline - performance.now())
    const silent = this.connectTimeoutMs < left
    r.limit = setTimeout(() => {
      r.cutShort = !silent
      link.destroy(
        silent
          ? `it did not answer the resume within ${this.connectTimeoutMs} ms (connectTimeoutMs), so it was ended`
          : 'it had not resumed the session when the linger time ran out',
      )
    }, silent ? this.connectTimeoutMs : left)
    this.#updateRef()
    try {
      try {
        await link.ready
      } catch (err) {
        // A program that cannot be started will not be the next time; a
        // socket nobody listens at may be listened at again (a forwarder
        // restarted): this client cannot tell that from a dead server.
        if (this.#transport.command) err.final = true
        throw err
      }
      await new Promise((resolve, reject) => {
        const id = ++this.#nextId
        const params = { protocol_version: PROTOCOL_VERSION, resume: this.#resume.token, client: CLIENT }
        const line = `${JSON.stringify({ jsonrpc: '2.0', id, method: 'initialize', params })}\n`
        // The answer is taken as it arrives, before the answers kept for
        // the session that follow it in the same read.
        const resumed = (welcome) => {
          // What is read here must be there: a server that breaks the
          // protocol ends the attempt, and with it the session.
          const pending = welcome?.session?.pending
          if (welcome?.session?.resumed !== true || !Array.isArray(pending)) {
            const err = new Error(`the server answered the resume with ${JSON.stringify(welcome)?.slice(0, 200)}, not a resumed session with its pending calls`)
            err.final = true
            return reject(err)
          }
          this.#resumed(welcome)
          resolve()
        }
        const refused = (err) => {
          // INVALID_ARGUMENT: the token is refused (the linger time passed,
          // or this is another server). Otherwise (the session is still
          // attached to the connection that dropped, which the server has
          // not seen end yet) the next attempt may succeed.
          if (err.code === 'INVALID_ARGUMENT') err.final = true
          reject(err)
        }
        r.resumeCall = { id, resolve: resumed, reject: refused }
        link.write(line)
      })
    } catch (err) {
      if (this.#link === link) this.#link = undefined
      link.destroy()
      throw err
    } finally {
      clearTimeout(r.limit)
      r.limit = undefined
    }
  }

  /**
   * The session was resumed: every call the server will still answer (its
   * `pending`) keeps waiting; one it will not was never received or
   * answered on the link that dropped: a reading call is sent again, any
   * other fails with ANSWER_LOST. Then what was made meanwhile is sent.
   */
  #resumed(welcome) {
    const r = this.#reconnecting
    this.#reconnecting = undefined
    const owed = new Set(welcome.session.pending)
    const lost = []
    for (const [id, call] of this.#pending) {
      if (!call.sent || owed.has(id)) continue
      if (READING_METHODS.has(call.method)) {
        this.#link.write(call.line)
      } else {
        this.#pending.delete(id)
        lost.push(call)
      }
    }
    for (const line of this.#unsent.splice(0)) this.#link.write(line)
    for (const call of this.#pending.values()) call.sent = true
    this.#updateRef()
    for (const call of lost) call.reject(this.#answerLost(call.method, r.drop))
    this.onResumed(welcome.session)
  }

  #ended(why) {
    if (this.lostReason !== undefined) return
    this.lostReason = this.#closing ? 'it was closed' : why
    this.#link = undefined
    // A reconnection under way stops: its pause ends, its attempt fails.
    const r = this.#reconnecting
    r?.wake()
    r?.resumeCall?.reject(this.lostError())
    const pending = [...this.#pending.values()]
    this.#pending.clear()
    this.#unsent = []
    for (const p of pending) p.reject(this.lostError())
    this.#holds = 0
    this.#updateRef()
    this.#setClosed()
    if (!this.#closing) this.onLost(this.lostError())
  }
}
