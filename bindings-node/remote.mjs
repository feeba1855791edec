// dsh-native/remote: the harness's ShellExecutor over the protocol face
// (`dsh serve`: JSON-RPC 2.0, one message per line), so commands run on
// another machine (`ssh host dsh serve --stdio`), in a container
// (`kubectl exec … dsh serve --stdio`) or behind a unix socket, with the
// API of the local NativeShellExecutor.
//
// What must answer synchronously is answered here, from the same rules:
// `resolve` and the validation of every spec run through a local
// NativeShellExecutor configured as the server is (it never runs anything),
// and the registry is mirrored: each process's output is read ahead by
// offset (`read_from`, never the server's consuming read), so `readOutput()`
// is a synchronous consuming read exactly as a local one.
//
// Terminal sessions are the server's `terminal_*` methods: a handle reads
// the output by long-poll, one read in flight, into what `readOutput()` and
// the `output` stream share, and stops asking while the stream's buffer is
// full or the server's `max_output_bytes` wait unread here (the server then
// holds the rest and the program waits, as a local session's does).
//
// Against a server that keeps sessions (`--linger`), a transport that drops
// is started again and the session resumed (Connection#reconnect): calls
// wait meanwhile, those the server no longer owes are sent again when they
// only read (READING_METHODS) or fail with ANSWER_LOST, and the mirrors are
// brought back in line by offset (Session#resumed).

import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import net from 'node:net'
import { Readable } from 'node:stream'

const require = createRequire(import.meta.url)
const { NativeShellExecutor, checkConfig } = require('./index.js')
const { composeDelta } = require('./loader.js')
const { version: PACKAGE_VERSION } = require('./package.json')

/** The protocol version this client speaks. */
const PROTOCOL_VERSION = 1
/** How this client names itself to the server (for its logs). */
const CLIENT = { name: 'dsh-native', version: PACKAGE_VERSION }
/** The largest piece of a stdin write sent in one message (as the local executor hands them to the core). */
const STDIN_PIECE = 1 << 20
/** How much of a command transport's stderr is kept for error messages. */
const STDERR_TAIL = 4096
/**
 * The longest message the server reads (the protocol's limit); a longer one
 * would be answered with an error that names no request, so it is refused
 * here instead.
 */
const MAX_MESSAGE_BYTES = 48 << 20
/** How long an ended transport may take to close before it is killed. */
const CLOSE_LIMIT_MS = 5000
/** How long a transport program that exited (or closed its output) may take to close the rest. */
const LINGER_MS = 1000
/**
 * A consuming read's window may have dropped up to this many continuation
 * bytes at its start (a cut inside a character), so it holds at least
 * `cap - WINDOW_SLACK` bytes once it slides.
 */
const WINDOW_SLACK = 3
/**
 * A terminal_read's wait, past what any clock can count: the server
 * answers once there is output or the output has ended, never with an
 * empty timeout, so a silent program costs no traffic.
 */
const LONG_POLL_MS = 1e30
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

// ----------------------------------------------------------------- errors

function describe(value) {
  return value === null ? 'null' : typeof value
}

/** An INVALID_ARGUMENT error shaped like the local face's own (index.js). */
function invalid(field, problem) {
  const err = new TypeError(`${field} ${problem}`)
  err.code = 'INVALID_ARGUMENT'
  err.field = field
  return err
}

function coded(code, message, extra) {
  const err = new Error(message)
  err.code = code
  if (extra) Object.assign(err, extra)
  return err
}

/** A write not sent because one before it to `id` was lost with a connection. */
function notSentBehind(method, id) {
  return coded(
    'ANSWER_LOST',
    `dsh-native/remote: ${method} to ${id} was not sent: an earlier write to it was lost with the connection, and this one would have reached it out of order`,
  )
}

/** The core's STDIN_CLOSED error, for what the mirror knows itself. */
function stdinClosed(id, reason) {
  const why = {
    'not-piped': 'it was not started with a stdin pipe',
    closed: 'its stdin was closed by close_stdin',
    exited: 'it has exited',
  }[reason]
  return coded('STDIN_CLOSED', `cannot write to the stdin of ${id}: ${why}`, { id, reason })
}

/** An INVALID_ARGUMENT error as the addon throws it (an Error, not a TypeError): for what the core itself would refuse. */
function refused(field, problem) {
  return coded('INVALID_ARGUMENT', `${field} ${problem}`, { field })
}

// The core's TERMINAL_CLOSED messages, for what a terminal handle knows itself.
const INPUT_GONE = "the terminal's program has exited: its input cannot be written"
const NO_FOREGROUND = 'the terminal has no foreground process group (its program has exited)'
const SESSION_ENDED = 'the terminal session has ended: it cannot be resized'

/** The signals a terminal's foreground group can be sent, in the core's order (its message lists them so). */
const TERMINAL_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGTSTP', 'SIGHUP']

/**
 * A number as Rust's `{}` shows an f64 in the core's messages: never an
 * exponent (`1e21` is `1000000000000000000000`), `inf`, `-0`.
 */
function rustNumber(v) {
  if (Number.isNaN(v)) return 'NaN'
  if (v === Infinity) return 'inf'
  if (v === -Infinity) return '-inf'
  if (Object.is(v, -0)) return '-0'
  const text = String(v)
  const m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(text)
  if (!m) return text
  // The same shortest digits, with the point moved instead of an exponent.
  const [, sign, lead, frac = '', exp] = m
  const digits = lead + frac
  const point = 1 + Number(exp)
  if (point >= digits.length) return sign + digits + '0'.repeat(point - digits.length)
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`
}

/** What is wrong with a terminal dimension by the core's rule (a whole number from 1 to 65535), or undefined. */
function dimensionProblem(v) {
  if (!Number.isFinite(v) || v <= 0) return `must be a positive finite number, got ${rustNumber(v)}`
  if (!Number.isInteger(v)) return `must be a whole number, got ${rustNumber(v)}`
  if (v > 65535) return `must be no greater than 65535, got ${rustNumber(v)}`
  return undefined
}

/** A string as Rust's `{:?}` shows it in the core's messages (`"bash-1"`). */
function quoted(s) {
  return JSON.stringify(s)
}

function snakeToCamel(segment) {
  return segment.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase())
}

/**
 * The server's field path in the local face's words, segment by segment
 * (`request.timeout_ms` → `request.timeoutMs`); after `env` or `dshEnv`
 * the rest is a variable's name and stays as it is.
 */
function camelField(path) {
  const parts = path.split('.')
  const out = []
  for (let i = 0; i < parts.length; i++) {
    out.push(snakeToCamel(parts[i]))
    if (out[i] === 'env' || out[i] === 'dshEnv') {
      if (i + 1 < parts.length) out.push(parts.slice(i + 1).join('.'))
      break
    }
  }
  return out.join('.')
}

/** JSON-RPC codes without a `data.code`: the protocol's own failures. */
const RPC_CODES = { [-32700]: 'PROTOCOL_ERROR', [-32600]: 'PROTOCOL_ERROR', [-32601]: 'NOT_SUPPORTED', [-32602]: 'INVALID_ARGUMENT', [-32002]: 'PROTOCOL_ERROR' }

/** A server error as the local face makes it: `code`, a camelCase `field`, `errno`, `id`, `reason`, `limit`. */
function fromRpcError(error) {
  const data = error !== null && typeof error === 'object' && error.data !== null && typeof error.data === 'object' ? error.data : {}
  const rpc = error?.code
  const code = typeof data.code === 'string' ? data.code : (RPC_CODES[rpc] ?? 'PROTOCOL_ERROR')
  let message = typeof error?.message === 'string' ? error.message : `the server failed with ${JSON.stringify(error)}`
  const extra = {}
  if (typeof data.field === 'string') {
    extra.field = camelField(data.field)
    if (message.startsWith(data.field)) message = extra.field + message.slice(data.field.length)
  }
  // Node's errno is negated, as Node's own errors carry it.
  if (typeof data.errno === 'number') extra.errno = -data.errno
  if (typeof data.id === 'string') extra.id = data.id
  if (typeof data.reason === 'string') extra.reason = data.reason
  if (typeof data.limit === 'string') extra.limit = data.limit
  return coded(code, message, extra)
}

// ----------------------------------------------------------------- shapes

/** Config keys: the local face's, the protocol's. */
const CONFIG_KEYS = [
  ['cwd', 'cwd'],
  ['timeoutMs', 'timeout_ms'],
  ['maxTimeoutMs', 'max_timeout_ms'],
  ['maxOutputBytes', 'max_output_bytes'],
  ['maxSpillBytes', 'max_spill_bytes'],
  ['graceMs', 'grace_ms'],
  ['spillDir', 'spill_dir'],
  ['retainSettled', 'retain_settled'],
  ['sandboxMode', 'sandbox_mode'],
  ['limits', 'limits'],
]
const LIMIT_KEYS = [
  ['memoryBytes', 'memory_bytes'],
  ['processes', 'processes'],
  ['cpuSeconds', 'cpu_seconds'],
  ['fileSizeBytes', 'file_size_bytes'],
  ['openFiles', 'open_files'],
]

function isObject(v) {
  return v !== null && typeof v === 'object'
}

/** A checked config for the wire: only the keys with a value. */
function wireConfig(config) {
  const out = {}
  if (!isObject(config)) return out
  for (const [camel, snake] of CONFIG_KEYS) {
    const v = config[camel]
    if (v === undefined) continue
    if (camel === 'limits') {
      const limits = {}
      for (const [c, s] of LIMIT_KEYS) if (v[c] !== undefined) limits[s] = v[c]
      out.limits = limits
    } else {
      out[snake] = v
    }
  }
  return out
}

/**
 * The server's effective config as the local resolver takes it: no
 * `spillDir` (the resolver writes no output, so it must make no
 * directory), and the server's cwd where the config names none.
 */
function resolverConfig(effective, hostCwd) {
  const out = {}
  for (const [camel, snake] of CONFIG_KEYS) {
    const v = effective[snake]
    if (camel === 'spillDir' || v === null || v === undefined) continue
    if (camel === 'limits') {
      const limits = {}
      for (const [c, s] of LIMIT_KEYS) if (v[s] !== null && v[s] !== undefined) limits[c] = v[s]
      out.limits = limits
    } else {
      out[camel] = v
    }
  }
  if (out.cwd === undefined && typeof hostCwd === 'string') out.cwd = hostCwd
  return out
}

/** A config without its spillDir, for a check that must not create a local directory. */
function withoutSpillDir(config) {
  if (!isObject(config) || config.spillDir === undefined) return config
  const { spillDir: _, ...rest } = config
  return rest
}

/**
 * A relative path taken against the server's cwd, as the server would take
 * it: both sides then make the same absolute path of the same text.
 */
function onServer(hostCwd, p) {
  return p.startsWith('/') || typeof hostCwd !== 'string' ? p : `${hostCwd}/${p}`
}

/** Whether two absolute paths name the same place as Rust compares paths (by components: `.` and repeated or trailing slashes aside). */
function samePath(a, b) {
  const parts = (p) => p.split('/').filter((c) => c !== '' && c !== '.').join('/')
  return parts(a) === parts(b)
}

function stringMap(v) {
  if (v === undefined || v === null) return null
  const out = {}
  // Variable names are keys, which the replacer does not see.
  for (const k of Object.keys(v)) if (v[k] !== undefined) out[wellFormedText(k)] = v[k]
  return out
}

/** A spec the local resolver accepted, as the protocol takes it: every key, null where absent. */
function wireSpec(spec) {
  const stdin = spec.stdin
  let stdinBase64 = null
  let stdinPipe = false
  if (typeof stdin === 'string') stdinBase64 = Buffer.from(stdin, 'utf8').toString('base64')
  else if (ArrayBuffer.isView(stdin)) stdinBase64 = Buffer.from(stdin.buffer, stdin.byteOffset, stdin.byteLength).toString('base64')
  else if (isObject(stdin)) stdinPipe = true
  const policy = spec.sandboxPolicy
  const limits = {}
  for (const [c, s] of LIMIT_KEYS) limits[s] = spec.limits?.[c] ?? null
  return {
    command: spec.command,
    workdir: spec.workdir,
    timeout_ms: spec.timeoutMs,
    stdout_max_bytes: spec.stdoutMaxBytes,
    stdin_base64: stdinBase64,
    stdin_pipe: stdinPipe,
    on_expiry: spec.onExpiry ?? 'kill',
    env: stringMap(spec.env),
    dsh_env: stringMap(spec.dshEnv),
    owner: spec.owner ?? null,
    sandbox_policy: isObject(policy)
      ? { mode: policy.mode, workspace_root: policy.workspaceRoot, session_id: policy.sessionId ?? null, network: policy.network ?? 'allow' }
      : null,
    limits,
  }
}

/** A terminal request the local resolver accepted, as `terminal_spawn` takes it: only the fields given. */
function wireTerminalRequest(request) {
  const out = {}
  if (request.argv != null) out.argv = [...request.argv]
  if (request.command != null) out.command = request.command
  if (request.cwd != null) out.cwd = request.cwd
  if (request.env != null) out.env = stringMap(request.env)
  if (request.dshEnv != null) out.dsh_env = stringMap(request.dshEnv)
  if (request.rows != null) out.rows = request.rows
  if (request.cols != null) out.cols = request.cols
  if (request.graceMs != null) out.grace_ms = request.graceMs
  const policy = request.sandboxPolicy
  if (isObject(policy)) {
    const wire = { mode: policy.mode }
    if (policy.workspaceRoot != null) wire.workspace_root = policy.workspaceRoot
    if (policy.sessionId != null) wire.session_id = policy.sessionId
    if (policy.network != null) wire.network = policy.network
    out.sandbox_policy = wire
  }
  return out
}

/** Sandbox facts as the local face gives them: absent fields omitted, `allow` implied. */
function sandboxInfo(s) {
  if (!isObject(s)) return undefined
  const out = { mode: s.mode, denied: s.denied }
  if (s.enforcement != null) out.enforcement = s.enforcement
  out.metadata = s.metadata
  if (s.runner_failed != null) out.runnerFailed = s.runner_failed
  if (s.network != null && s.network !== 'allow') out.network = s.network
  if (s.network_enforcement != null) out.networkEnforcement = s.network_enforcement
  return out
}

function enforcement(e) {
  return isObject(e) && Object.keys(e).length > 0 ? { ...e } : undefined
}

function collected(o) {
  const out = { text: o.text, truncated: o.truncated }
  if (o.spill_path != null) out.spillPath = o.spill_path
  if (o.spill_error != null) out.spillError = o.spill_error
  return out
}

/** A run result in the ShellRunResult shape NativeShellExecutor gives (index.js `runResult`). */
function runResult(r) {
  const result = { exitCode: r.exit_code, signal: r.signal }
  if (r.exit_status_unavailable) result.exitStatusUnavailable = true
  result.timedOut = r.timed_out
  result.aborted = r.aborted
  result.timeoutMs = r.timeout_ms
  result.stdout = collected(r.stdout)
  result.stderr = collected(r.stderr)
  const sandbox = sandboxInfo(r.sandbox)
  if (sandbox !== undefined) result.sandbox = sandbox
  if (r.survivors > 0) result.survivors = r.survivors
  if (r.background_id != null) result.backgroundId = r.background_id
  if (r.limit != null) result.limit = r.limit
  const limits = enforcement(r.limits_enforcement)
  if (limits !== undefined) result.limitsEnforcement = limits
  return result
}

// -------------------------------------------------------------- arguments

/** `signal` is the one field that is not data: an AbortSignal or absent (as index.js checks it). */
function checkSignal(signal, field) {
  if (signal === undefined) return undefined
  const isSignal =
    (typeof AbortSignal === 'function' && signal instanceof AbortSignal) ||
    (signal !== null && typeof signal === 'object' && typeof signal.aborted === 'boolean' && typeof signal.addEventListener === 'function')
  if (!isSignal) throw invalid(field, `must be an AbortSignal, got ${describe(signal)}`)
  return signal
}

function checkObject(value, field) {
  if (value === null || typeof value !== 'object') throw invalid(field, `must be an object, got ${describe(value)}`)
}

/** run()'s options checked: its `onOutput` callback, or undefined. */
function checkRunOptions(options) {
  if (options === undefined) return undefined
  checkObject(options, 'options')
  for (const key of Object.keys(options)) {
    if (key !== 'onOutput') throw invalid(`options.${key}`, 'is not a known field (expected: onOutput)')
  }
  const { onOutput } = options
  if (onOutput !== undefined && typeof onOutput !== 'function') throw invalid('options.onOutput', `must be a function, got ${describe(onOutput)}`)
  return onOutput
}

/** A transport checked, with the words errors name it by, and whether a dropped session is resumed (`reconnect`, default true). */
function checkTransport(transport) {
  const shape = 'must be { command: string[] } (a program talking on its stdin and stdout) or { socket: string } (a unix socket)'
  if (!isObject(transport)) throw invalid('transport', `${shape}, got ${describe(transport)}`)
  for (const key of Object.keys(transport)) {
    if (key !== 'command' && key !== 'socket' && key !== 'reconnect') {
      throw invalid(`transport.${key}`, 'is not a known field (expected one of: command, socket, reconnect)')
    }
  }
  const { command, socket } = transport
  if ((command === undefined) === (socket === undefined)) throw invalid('transport', `${shape}: exactly one of the two`)
  const reconnect = transport.reconnect ?? true
  if (typeof reconnect !== 'boolean') throw invalid('transport.reconnect', `must be a boolean, got ${describe(transport.reconnect)}`)
  if (command !== undefined) {
    if (!Array.isArray(command)) throw invalid('transport.command', `must be an array of strings (the program, then its arguments), got ${describe(command)}`)
    if (command.length === 0) throw invalid('transport.command', 'must name a program (it is empty)')
    command.forEach((arg, i) => {
      if (typeof arg !== 'string') throw invalid(`transport.command.${i}`, `must be a string, got ${describe(arg)}`)
    })
    if (command[0] === '') throw invalid('transport.command.0', 'must name a program (it is empty)')
    return { command: [...command], label: `\`${command.join(' ')}\``, reconnect }
  }
  if (typeof socket !== 'string') throw invalid('transport.socket', `must be a string (a unix socket's path), got ${describe(socket)}`)
  if (socket === '') throw invalid('transport.socket', "must be a unix socket's path (it is empty)")
  return { socket, label: `unix:${socket}`, reconnect }
}

/**
 * A string the server can read: a lone surrogate (which JSON carries as an
 * escape the server refuses) becomes U+FFFD, as the addon's conversion of
 * a JS string makes it.
 */
function wellFormedText(value) {
  if (typeof value.isWellFormed === 'function') return value.isWellFormed() ? value : value.toWellFormed()
  return /[\uD800-\uDFFF]/.test(value) ? Buffer.from(value, 'utf8').toString('utf8') : value
}

/** JSON.stringify's replacer: every string value well-formed. */
function wellFormed(_key, value) {
  return typeof value === 'string' ? wellFormedText(value) : value
}

// ------------------------------------------------------------- connection

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
class Connection {
  /** The transport's words, for errors. */
  label
  /** Set once the connection is over: the reason, for every later call. */
  lostReason
  onNotification = () => {}
  onLost = () => {}
  /** The session was resumed over a new link: what the mirrors missed is asked for again. */
  onResumed = () => {}
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

  /** The server broke the protocol: the stream is ended and treated as lost (a resume would not mend it). */
  #broken(why) {
    const link = this.#link
    this.#ended(`${why}; the connection was closed`)
    link?.destroy()
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
    // An attempt that hangs (an ssh that never connects) ends at the deadline.
    r.cutShort = false
    r.limit = setTimeout(() => {
      r.cutShort = true
      link.destroy('it had not resumed the session when the linger time ran out')
    }, Math.max(0, r.deadline - performance.now()))
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

// ----------------------------------------------------------------- mirror

/** One stream of a mirrored process, read ahead by offset. */
class StreamMirror {
  /** Where the next consuming read starts (whole-stream offset). */
  cursor = 0
  /** Where the read-ahead text ends: `text` covers [cursor, end). */
  end = 0
  text = ''
  /** Unread bytes slid out of the window since the last consuming read. */
  lossy = false
  /** The latest end the server told of. */
  known = 0
  /** The end the last read asked for: a read that ended short of it held back part of a character. */
  covered = 0
  /** The end once the process settled. */
  finalEnd
  /** A settled stream that read no further (its end held back an incomplete character). */
  stuck = false
  reading = false
  spillPath = null
  spillError = null
  /** A lower bound of the window's size: a span larger than it minus WINDOW_SLACK may have slid out. */
  cap

  constructor(cap) {
    this.cap = cap
  }

  caughtUp() {
    return this.finalEnd !== undefined && (this.end >= this.finalEnd || this.stuck)
  }

  /** The read-ahead position, for a process whose consuming reads start at `offset`. */
  startAt(offset) {
    this.cursor = this.end = this.covered = offset
    this.known = Math.max(this.known, offset)
  }

  /** What `discard_output` leaves: nothing to read, and a spill file no more. */
  discard() {
    this.text = ''
    this.lossy = false
    this.cursor = this.end = this.finalEnd ?? Math.max(this.end, this.known)
    this.stuck = true
    if (this.spillPath != null) {
      this.spillPath = null
      this.spillError = 'the process was forgotten'
    }
  }
}

/** One background process as the client knows it. */
class Mirror {
  status = 'running'
  /** The server said it settled (or the connection ended). */
  settled = false
  /** Settled and its output read ahead to the end: `done` resolved. */
  final = false
  /** Its consuming reads' start is known (a hand-over learns it after the run's result). */
  adopted = false
  /** Forgotten or retired: its output is gone. */
  discarded = false
  /** Listeners are not told (a process the executor's disposal ended). */
  quiet = false
  /** A start the server refused: this side's alone. */
  refusedHere = false
  stopAsked = false
  stdinClosed = false
  exitCode = null
  signal = null
  exitStatusUnavailable = false
  survivors = 0
  sandbox
  limit
  limitsEnforcement
  /** An adoption waiting for it to settle. */
  snapshotWaiters = []
  handle
  done
  resolveDone

  constructor(id, spec, cap) {
    this.id = id
    this.command = spec.command
    this.owner = typeof spec.owner === 'string' ? spec.owner : undefined
    this.hasStdinPipe = isObject(spec.stdin) && !ArrayBuffer.isView(spec.stdin)
    this.streams = { stdout: new StreamMirror(cap), stderr: new StreamMirror(cap) }
    this.done = new Promise((resolve) => (this.resolveDone = resolve))
  }

  /** The consuming read: what was read ahead, then the cursors move on. */
  read() {
    const { stdout: o, stderr: e } = this.streams
    const read = { task: this.handle, delta: composeDelta(o.text, e.text), lossy: o.lossy || e.lossy }
    if (o.spillPath != null) read.stdoutSpillPath = o.spillPath
    if (e.spillPath != null) read.stderrSpillPath = e.spillPath
    if (o.spillError != null) read.stdoutSpillError = o.spillError
    if (e.spillError != null) read.stderrSpillError = e.spillError
    for (const s of [o, e]) {
      s.cursor = s.end
      s.text = ''
      s.lossy = false
    }
    return read
  }

  /** A process snapshot's ending (the server's `process` object, settled). */
  applyEnding(p) {
    this.status = p.status
    this.exitCode = p.exit_code ?? null
    this.signal = p.signal ?? null
    this.exitStatusUnavailable = p.exit_status_unavailable === true
    this.survivors = p.survivors ?? 0
    this.sandbox = sandboxInfo(p.sandbox)
    this.limit = p.limit ?? undefined
    this.limitsEnforcement = enforcement(p.limits_enforcement)
  }
}

// ---------------------------------------------------------------- session

/** An already-fired signal: what makes the local resolver check a spec and run nothing. */
const CHECK_ONLY = AbortSignal.abort()

/** Everything a RemoteShellExecutor holds (module-private, so processes and the executor share it). */
class Session {
  conn
  resolver
  hostCwd
  /** The server's effective config (protocol keys), as last reported. */
  effective
  /** The settled processes kept in the registry, as the server keeps them. */
  retain
  /** The window a process started now gets (the resolver's maxOutputBytes). */
  window
  /** id → Mirror, in start order: the registry. */
  procs = new Map()
  /** Background ids of runs in flight: a hand-over at their timeout registers there. */
  pending = new Map()
  listeners = new Set()
  /** Runs in flight, which dispose waits for. */
  runs = new Set()
  /** run_id → what takes the `run_output` chunks of a streamed run. */
  outputSinks = new Map()
  /**
   * The run_ids of runs in flight whose cancel was sent: sent again once a
   * dropped session is resumed, since it may have been lost with the drop
   * (the server takes a second cancel of a run as the first).
   */
  cancelled = new Set()
  /** How many reconfigure calls were made: one whose answer was lost is sent again only while it is the latest. */
  reconfigures = 0
  /** id → TerminalMirror: the terminal sessions this client spawned. */
  terms = new Map()
  nextId = 0
  nextRun = 0
  nextTerm = 0
  disposed = false
  /** The executor's dispose once it began (a terminal's terminate() then waits for it). */
  disposal

  constructor(conn, init) {
    this.conn = conn
    this.hostCwd = init.host?.cwd ?? null
    this.effective = init.config
    this.retain = init.config.retain_settled
    this.resolver = new NativeShellExecutor(resolverConfig(init.config, this.hostCwd))
    this.window = this.measureWindow()
    conn.onNotification = (method, params) => this.notification(method, params)
    conn.onLost = () => this.lost()
    conn.onResumed = () => this.resumed()
  }

  /** The resolver's maxOutputBytes: a request without stdoutMaxBytes gets exactly it. */
  measureWindow() {
    return this.resolver.resolve({ command: '', workdir: '/' }).stdoutMaxBytes
  }

  find(id) {
    return this.procs.get(id) ?? this.pending.get(id)
  }

  /** The id the next process gets: `bash-1`, `bash-2`, … (this client's own counter; the server takes it as given). */
  nextIdName() {
    return `bash-${this.nextId + 1}`
  }

  takeId() {
    const id = this.nextIdName()
    this.nextId += 1
    return id
  }

  /**
   * A call whose answer nobody waits for; its failure changes nothing here.
   * Each such call (kill, close_stdin, forget) does the same sent twice, so
   * one whose answer was lost with a dropped connection is sent again.
   */
  fire(method, params) {
    this.conn.call(method, params).catch((err) => {
      if (err.code === 'ANSWER_LOST') this.fire(method, params)
    })
  }

  notification(method, params) {
    if (method === 'output') {
      const m = this.find(params.id)
      if (m === undefined || m.discarded) return
      m.streams.stdout.known = Math.max(m.streams.stdout.known, params.stdout_end)
      m.streams.stderr.known = Math.max(m.streams.stderr.known, params.stderr_end)
      this.pumpBoth(m)
    } else if (method === 'terminal_exit') {
      // May come before the spawn's answer: the mirror exists from the call on.
      this.terms.get(params.terminal?.id)?.apply(params.terminal)
    } else if (method === 'task_done') {
      const p = params.process
      const m = this.find(p?.id)
      if (m === undefined || m.settled) return
      this.settledThere(m, p)
    } else if (method === 'run_output') {
      this.outputSinks.get(params.run_id)?.(params)
    }
  }

  /** The server says `m` settled (`p`, its snapshot): as its task_done. */
  settledThere(m, p) {
    // As the core settles one: room is made before it counts as settled
    // (so the oldest other settled one goes, not it), then again after.
    this.retire(1)
    this.settle(m, p)
    this.retire(0)
    this.pumpBoth(m)
    this.finish(m)
  }

  /**
   * The session was resumed over a new connection. What the server had
   * to say meanwhile (answers, task_done, terminal_exit) came right after
   * the resume; `output` notifications were not kept: each running
   * process's ends are asked for (`get`), and its output read on from the
   * mirror's own offsets, so every byte arrives once. A process the server
   * does not have was never started there (its start was lost with the
   * connection). Each terminal's exit facts are asked for too.
   */
  resumed() {
    const warn = (err) => {
      if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
    }
    for (const runId of this.cancelled) this.conn.notify('cancel', { run_id: runId })
    for (const m of this.procs.values()) {
      if (m.settled || m.discarded) continue
      this.conn.call('get', { id: m.id }).then(({ process: p }) => {
        if (m.discarded || m.settled) return
        if (p == null) {
          this.refused(m, new Error(`the connection to ${this.conn.label} dropped before the server had this start: it has no process of this id`))
          return
        }
        const { stdout, stderr } = m.streams
        stdout.known = Math.max(stdout.known, p.output.stdout_end)
        stderr.known = Math.max(stderr.known, p.output.stderr_end)
        if (p.settled) this.settledThere(m, p)
        else this.pumpBoth(m)
      }, warn)
    }
    for (const t of this.terms.values()) {
      if (!t.spawned || t.exited) continue
      this.conn.call('terminal_get', { id: t.id }).then(({ terminal }) => t.apply(terminal), warn)
    }
  }

  /** Takes the server's settled snapshot: the ending and the final ends. */
  settle(m, p) {
    m.settled = true
    m.applyEnding(p)
    const o = p.output
    for (const [name, end] of [['stdout', o.stdout_end], ['stderr', o.stderr_end]]) {
      const s = m.streams[name]
      s.finalEnd = end
      s.known = Math.max(s.known, end)
    }
    for (const wake of m.snapshotWaiters.splice(0)) wake()
  }

  /**
   * The retention rule of the core (`retire_oldest_settled`): the oldest
   * settled processes, in start order, beyond `retainSettled` leave the
   * registry, and their output goes; `settling` counts one about to settle.
   */
  retire(settling) {
    let excess = [...this.procs.values()].filter((m) => m.settled).length + settling - this.retain
    for (const m of [...this.procs.values()]) {
      if (excess <= 0) break
      if (!m.settled) continue
      excess -= 1
      this.procs.delete(m.id)
      this.discard(m)
    }
  }

  discard(m) {
    m.discarded = true
    m.streams.stdout.discard()
    m.streams.stderr.discard()
    this.finish(m)
  }

  pumpBoth(m) {
    if (!m.adopted || m.discarded) return
    this.pump(m, 'stdout')
    this.pump(m, 'stderr')
  }

  /**
   * Reads `name` ahead from where the read-ahead ends to what the server
   * told of. A read that slid out of the window (`lossy`), or a span the
   * window may no longer hold, is read again from the cursor instead: what
   * a consuming read returns then is the window, and says so.
   */
  async pump(m, name) {
    const s = m.streams[name]
    if (s.reading) return
    s.reading = true
    try {
      while (!m.discarded && this.conn.lostReason === undefined) {
        const target = s.finalEnd ?? s.known
        if (s.end >= target || s.stuck) break
        if (s.finalEnd === undefined && s.known <= s.covered) break
        const asked = target
        const from = s.end
        // A consuming read meanwhile moves the cursor to `from` and empties
        // the text: the answer, which starts there, is still what follows.
        // A lossy one is the window, all of it past `from`.
        let r = await this.conn.call('read_from', { id: m.id, stream: name, from })
        let replace = r.lossy
        if (!r.lossy && r.next_offset - s.cursor > s.cap - WINDOW_SLACK) {
          const cursor = s.cursor
          const again = await this.conn.call('read_from', { id: m.id, stream: name, from: cursor })
          // A consuming read meanwhile returned part of what this answer
          // holds: ask again from where it left the cursor.
          if (s.cursor !== cursor) continue
          r = again
          replace = true
          // Whatever it returned is in the window, which is at most `cap`.
          if (!r.lossy) s.cap = Math.max(s.cap, r.next_offset - cursor)
        }
        if (m.discarded) break
        if (replace) {
          s.text = r.text
          if (r.lossy) s.lossy = true
        } else {
          s.text += r.text
        }
        const progressed = replace || r.next_offset > from
        s.end = r.next_offset
        s.covered = Math.max(asked, r.next_offset)
        s.spillPath = r.spill_path
        s.spillError = r.spill_error
        // A settled stream that gives no more would be asked forever.
        if (s.finalEnd !== undefined && !progressed) s.stuck = true
      }
    } catch (err) {
      // Forgotten or retired by the server meanwhile: its output is gone
      // there, as it is here. A lost connection settles everything itself.
      if (err.code === 'NOT_FOUND') this.discard(m)
      else if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
      s.stuck = true
    } finally {
      s.reading = false
    }
    this.finish(m)
  }

  /** Resolves `done` once settled and read ahead to the end, telling the listeners first. */
  finish(m) {
    if (m.final || !m.settled || !m.adopted) return
    if (!m.discarded && !(m.streams.stdout.caughtUp() && m.streams.stderr.caughtUp())) return
    m.final = true
    this.conn.hold(-1)
    if (!m.quiet) {
      for (const listener of [...this.listeners]) {
        try {
          listener(m.handle)
        } catch (err) {
          process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'DshListenerWarning')
        }
      }
    }
    m.resolveDone()
  }

  /** A new mirror, held open (the event loop runs) until it is final. */
  mirror(id, spec) {
    const m = new Mirror(id, spec, this.window)
    m.handle = new RemoteShellProcess(HANDLE, this, m)
    this.conn.hold(1)
    return m
  }

  /** A start the server refused after the mirror was made: a spawn failure, settled as the core settles one. */
  refused(m, err) {
    if (m.settled) return
    this.retire(1)
    m.refusedHere = true
    m.settled = true
    m.status = 'killed'
    const s = m.streams.stderr
    s.text = `spawn failed: ${err.message}`
    s.end = s.finalEnd = s.known = Buffer.byteLength(s.text)
    m.streams.stdout.finalEnd = 0
    this.retire(0)
    this.finish(m)
  }

  /**
   * A run handed over at its timeout: its process joins the registry once
   * its reads' start is known. The server registered it at the hand-over,
   * possibly among starts made meanwhile, and counted it in its retention
   * since: the registry is taken from the server's list, in its order.
   */
  async adopt(m) {
    let listed
    try {
      listed = (await this.conn.call('list', {})).processes
    } catch {
      listed = undefined
    }
    const snapshot = listed?.find((p) => p.id === m.id)
    if (listed !== undefined) this.reorder(listed, m)
    // Settled and retired before the list: gone there, so gone here once its
    // task_done (which it still gets) has settled it.
    if (snapshot === undefined && listed !== undefined && !m.settled) {
      await new Promise((resolve) => m.snapshotWaiters.push(resolve))
    }
    this.pending.delete(m.id)
    m.adopted = true
    if (snapshot === undefined) {
      this.procs.delete(m.id)
      this.discard(m)
      return
    }
    m.streams.stdout.startAt(snapshot.output.stdout_read)
    m.streams.stderr.startAt(snapshot.output.stderr_read)
    this.pumpBoth(m)
    this.finish(m)
  }

  /**
   * The registry in the server's order (`listed`, with `m` joining it); a
   * settled process the server no longer has was retired there: its
   * output goes here too. A start only this side knows (refused by the
   * server) keeps its place at the end.
   */
  reorder(listed, m) {
    const order = new Map()
    for (const p of listed) {
      const known = p.id === m.id ? m : this.procs.get(p.id)
      if (known !== undefined) order.set(p.id, known)
    }
    for (const [id, x] of this.procs) {
      if (order.has(id)) continue
      if (x.settled && !x.refusedHere) this.discard(x)
      else order.set(id, x)
    }
    this.procs = order
  }

  /** The connection ended unasked: every process is settled with what is known, and nothing waits. */
  lost() {
    for (const t of this.terms.values()) t.lost(this.disposed)
    for (const m of [...this.procs.values(), ...this.pending.values()]) {
      if (!m.settled) {
        m.settled = true
        m.status = 'killed'
        m.exitCode = null
        m.signal = null
        m.exitStatusUnavailable = true
        // A hand-over not yet in the registry was never the listeners' to hear of.
        m.quiet = this.disposed || this.pending.has(m.id)
      }
      for (const s of Object.values(m.streams)) {
        s.finalEnd ??= s.end
        s.stuck = true
      }
      for (const wake of m.snapshotWaiters.splice(0)) wake()
      m.adopted = true
      this.finish(m)
    }
  }
}

// -------------------------------------------------------------- terminals

/**
 * One terminal session as the client knows it. Its output is read by
 * long-poll (`terminal_read`, one in flight at a time) into `unread`, which
 * `readOutput()` and the `output` stream take from, as the core's buffer
 * is shared locally. Reading stops while the stream's buffer is full or
 * `unread` holds the server's `max_output_bytes`: the server then keeps
 * what the program prints, up to its own bound, and the program waits, as
 * a local session's does.
 */
class TerminalMirror {
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

// ---------------------------------------------------------------- classes

const HANDLE = Symbol('dsh-native remote handle')
const CONNECT = Symbol('dsh-native remote connect')

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
    if (bytes.length <= STDIN_PIECE) return this.#queueStdin(() => send(bytes))
    return this.#queueStdin(async () => {
      for (let at = 0; at < bytes.length; at += STDIN_PIECE) await send(bytes.subarray(at, at + STDIN_PIECE))
    })
  }

  // As index.js: with nothing queued a write is sent at once, so
  // `writeStdin(x); closeStdin()` delivers x; the pieces of one write are
  // never interleaved with another's.
  #stdinTail = Promise.resolve()
  #stdinQueued = 0
  /** A write lost with a connection: those queued behind it are not sent. */
  #stdinLost
  #queueStdin(write) {
    const inTurn = () => (this.#stdinLost === undefined ? write() : Promise.reject(notSentBehind('write_stdin', this.#m.id)))
    const written = this.#stdinQueued === 0 ? inTurn() : this.#stdinTail.then(inTurn)
    this.#stdinQueued++
    this.#stdinTail = written
      .catch((err) => {
        if (err?.code === 'ANSWER_LOST') this.#stdinLost = err
      })
      .finally(() => {
        // The queue behind the lost write has been refused: new writes go.
        if (--this.#stdinQueued === 0) this.#stdinLost = undefined
      })
    return written
  }

  closeStdin() {
    const m = this.#m
    if (!m.hasStdinPipe) throw stdinClosed(m.id, 'not-piped')
    if (m.stdinClosed || m.settled) return false
    m.stdinClosed = true
    this.#session.fire('close_stdin', { id: m.id })
    return true
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
  #writeTail = Promise.resolve()
  #writesQueued = 0
  /** A write lost with a connection: those queued behind it are not sent. */
  #writeLost

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
   * and in call order; one past STDIN_PIECE goes in pieces, each sent once
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
      if (typeof payload === 'string' && (payload.length * 3 <= STDIN_PIECE || Buffer.byteLength(payload) <= STDIN_PIECE)) {
        await conn.call('terminal_write', { id, data: payload })
        return
      }
      const bytes = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload
      for (let at = 0; at < bytes.length || at === 0; at += STDIN_PIECE) {
        await conn.call('terminal_write', { id, data_base64: bytes.subarray(at, at + STDIN_PIECE).toString('base64') })
      }
    }
    // With nothing queued it is sent at once, so a write and the call after
    // it reach the server in that order. Writes queued behind one lost
    // with a connection are not sent: they would arrive out of order.
    const inTurn = () => (this.#writeLost === undefined ? send() : Promise.reject(notSentBehind('terminal_write', m.id)))
    const written = this.#writesQueued === 0 ? inTurn() : this.#writeTail.then(inTurn)
    this.#writesQueued++
    this.#writeTail = written
      .catch((err) => {
        if (err?.code === 'ANSWER_LOST') this.#writeLost = err
      })
      .finally(() => {
        if (--this.#writesQueued === 0) this.#writeLost = undefined
      })
    return this.#track(written)
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
    // Over once the program exited and its output ended (a dispose learns
    // both before it closes the connection): the server would refuse it.
    if (m.terminated || (m.exited && m.outputEnded)) throw coded('TERMINAL_CLOSED', SESSION_ENDED)
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

/**
 * The harness's ShellExecutor over `dsh serve` (docs/protocol.md): the API
 * of NativeShellExecutor, made by `RemoteShellExecutor.connect()`.
 */
export class RemoteShellExecutor {
  #s
  #disposing

  /**
   * Connects: `transport` is `{ command: [...] }` (a program speaking the
   * protocol on its stdin and stdout: `['ssh', 'host', 'dsh', 'serve',
   * '--stdio']`) or `{ socket: path }` (`dsh serve --listen unix:PATH`);
   * `config` is a NativeShellExecutorConfig for the server's executor.
   */
  static async connect(options) {
    checkObject(options, 'options')
    for (const key of Object.keys(options)) {
      if (key !== 'transport' && key !== 'config') throw invalid(`options.${key}`, 'is not a known field (expected one of: transport, config)')
    }
    const transport = checkTransport(options.transport)
    const config = options.config ?? undefined
    // Every field but spillDir is checked here as the local face checks it
    // (a spillDir is the server's directory, checked there).
    checkConfig(withoutSpillDir(config))
    if (isObject(config) && config.spillDir !== undefined && typeof config.spillDir !== 'string') checkConfig({ spillDir: config.spillDir })
    const conn = await Connection.open(transport)
    let init
    try {
      init = await conn.call('initialize', {
        protocol_version: PROTOCOL_VERSION,
        config: wireConfig(config),
        output_notifications: true,
        client: CLIENT,
      })
    } catch (err) {
      await conn.close()
      throw err
    }
    // A server that keeps sessions (`--linger`) gave a token: a dropped
    // transport is then started again and the session resumed.
    if (transport.reconnect && typeof init.session?.token === 'string') conn.resumeWith(init.session)
    return new RemoteShellExecutor(CONNECT, conn, init)
  }

  constructor(token, conn, init) {
    if (token !== CONNECT) throw new TypeError('RemoteShellExecutor is made by RemoteShellExecutor.connect({ transport, config })')
    this.#s = new Session(conn, init)
  }

  get sandboxMode() {
    return this.#s.resolver.sandboxMode
  }

  reconfigure(config) {
    const s = this.#s
    // No command will run on a server that is gone: say so, as a disposed
    // executor says DISPOSED.
    if (!s.disposed && s.conn.lostReason !== undefined) throw s.conn.lostError()
    // Checked whole before anything changes, as locally: a bad field
    // changes nothing, here or there.
    let local = withoutSpillDir(config ?? {})
    if (isObject(local)) {
      // Without a cwd the server resolves against its own; so must the resolver.
      const cwd = local.cwd
      local = { ...local, cwd: typeof cwd === 'string' && cwd !== '' ? onServer(s.hostCwd, cwd) : (cwd ?? s.hostCwd ?? undefined) }
    }
    checkConfig(local)
    const spillDir = isObject(config) ? config.spillDir : undefined
    if (spillDir !== undefined) {
      if (typeof spillDir !== 'string') checkConfig({ spillDir })
      const current = s.effective.spill_dir
      if (!samePath(onServer(s.hostCwd, spillDir), current)) {
        const err = new Error(`config.spillDir cannot change after the executor is made (it is ${current})`)
        err.code = 'INVALID_ARGUMENT'
        err.field = 'config.spillDir'
        throw err
      }
    }
    s.resolver.reconfigure(local)
    s.window = s.measureWindow()
    if (isObject(config) && typeof config.retainSettled === 'number') s.retain = config.retainSettled
    const wire = wireConfig(config)
    if (wire.cwd !== undefined) wire.cwd = local.cwd
    const nth = ++s.reconfigures
    const send = () =>
      s.conn.call('reconfigure', { config: wire }).then(
        (answer) => {
          s.effective = answer.config
          s.retain = answer.config.retain_settled
        },
        (err) => {
          // Its answer was lost with a dropped connection: a whole
          // configuration, so sending it again is sending it once, unless
          // a later one was sent since (that one is then in force).
          if (err.code === 'ANSWER_LOST' && nth === s.reconfigures) return send()
          if (err.code !== 'CONNECTION_LOST' && err.code !== 'DISPOSED' && err.code !== 'ANSWER_LOST') process.emitWarning(err, 'DshRemoteWarning')
        },
      )
    send()
  }

  resolve(request) {
    const s = this.#s
    // A relative workspaceRoot is taken against the server's cwd, as the
    // server would take it.
    const policy = isObject(request) ? request.sandboxPolicy : undefined
    const root = isObject(policy) ? policy.workspaceRoot : undefined
    if (typeof root === 'string' && root !== '' && !root.startsWith('/') && typeof s.hostCwd === 'string') {
      request = { ...request, sandboxPolicy: { ...policy, workspaceRoot: `${s.hostCwd}/${root}` } }
    }
    return s.resolver.resolve(request)
  }

  async run(spec, options) {
    const s = this.#s
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    const onOutput = checkRunOptions(options)
    // The local resolver judges the spec by the core's rules and runs
    // nothing: the error a bad spec (or an aborted signal) gets is the
    // local face's own.
    let refusal
    try {
      await s.resolver.run({ ...spec, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR' || signal?.aborted) throw err
      refusal = err
    }
    // Aborted while it was checked: refused as an already aborted one is,
    // with the core's own error, and nothing is sent.
    if (signal?.aborted) throw refusal ?? coded('ABORT_ERR', 'cancelled before the command started')
    const wire = wireSpec(spec)
    const runId = `run-${++s.nextRun}`
    const params = { spec: wire, run_id: runId }
    let handOver
    if (wire.on_expiry === 'background') {
      // Named now, so the handed-over process is known by our id and its
      // notifications find it even before the result arrives.
      handOver = s.mirror(s.takeId(), spec)
      s.pending.set(handOver.id, handOver)
      params.background_id = handOver.id
    }
    // Once the answer came there is nothing to cancel (a handed-over
    // process is killed instead), and nothing to send again after a drop.
    let answered = false
    const cancel = () => {
      if (answered) return
      s.cancelled.add(runId)
      s.conn.notify('cancel', { run_id: runId })
    }
    // What onOutput threw, or the promise it returned rejected with: the
    // run is cancelled, and rejects with it once its answer came and every
    // promise onOutput returned has settled (the callback's failure is the
    // caller's, never the connection's, and never an unhandled rejection).
    let outputFailure
    const callbacks = new Set()
    const failed = (error) => {
      if (outputFailure) return
      outputFailure = { error }
      cancel()
    }
    if (onOutput) {
      params.stream = true
      s.outputSinks.set(runId, (chunk) => {
        if (outputFailure) return
        let returned
        try {
          returned = onOutput({ stream: chunk.stream, offset: chunk.offset, data: Buffer.from(chunk.data_base64, 'base64') })
        } catch (error) {
          failed(error)
          return
        }
        if (typeof returned?.then === 'function') {
          const settled = Promise.resolve(returned).then(() => {}, failed)
          callbacks.add(settled)
          settled.then(() => callbacks.delete(settled))
        }
      })
    }
    const running = s.conn.call('run', params)
    if (signal) {
      if (signal.aborted) cancel()
      else signal.addEventListener('abort', cancel, { once: true })
    }
    // The run's own ending, which dispose waits for: its answer, and a
    // hand-over adopted.
    const ending = (async () => {
      let result
      try {
        result = runResult((await running).result)
      } catch (err) {
        // Its answer lost with a dropped connection, the run may have been
        // handed over before: the process is then kept, known by its id.
        const handedOver = handOver && err.code === 'ANSWER_LOST' && (await s.conn.call('get', { id: handOver.id }).catch(() => undefined))?.process
        if (handedOver) await s.adopt(handOver)
        else if (handOver) this.#drop(handOver)
        throw err
      } finally {
        answered = true
        signal?.removeEventListener('abort', cancel)
        s.outputSinks.delete(runId)
        s.cancelled.delete(runId)
      }
      if (handOver && result.backgroundId === handOver.id) {
        await s.adopt(handOver)
        // Handed over: from now on the signal kills the process, as for
        // start().
        const task = handOver.handle
        if (signal?.aborted) task.kill()
        else if (signal && !handOver.final) {
          const onKill = () => task.kill()
          signal.addEventListener('abort', onKill, { once: true })
          task.done.then(() => signal.removeEventListener('abort', onKill))
        }
        return { result, task }
      }
      if (handOver) this.#drop(handOver)
      return { result }
    })()
    s.runs.add(ending)
    const forget = () => s.runs.delete(ending)
    ending.then(forget, forget)
    // What the caller gets, once every promise onOutput returned has
    // settled too (dispose does not wait for those). A failed onOutput is
    // the outcome, and a process the run was handed over to goes with it.
    return ending.then(
      async ({ result, task }) => {
        await Promise.all(callbacks)
        if (!outputFailure) return result
        task?.kill()
        throw outputFailure.error
      },
      async (err) => {
        await Promise.all(callbacks)
        throw err
      },
    )
  }

  /** A hand-over that did not happen: its mirror goes. */
  #drop(m) {
    const s = this.#s
    s.pending.delete(m.id)
    if (!m.final) {
      m.final = true
      s.conn.hold(-1)
    }
  }

  start(spec) {
    const s = this.#s
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    try {
      s.resolver.start({ ...spec, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR' || signal?.aborted) throw err
    }
    // What cannot be sent (a lost connection, a spec past the message
    // limit) throws here, as a refused local start throws, and takes no id.
    const id = s.nextIdName()
    const send = s.conn.prepare('start', { spec: wireSpec(spec), id })
    s.takeId()
    const m = s.mirror(id, spec)
    m.adopted = true
    s.procs.set(m.id, m)
    send().catch((err) => {
      // A lost connection settles every process itself; a start whose
      // answer was lost is looked up once the session is resumed (Session#resumed).
      if (err.code !== 'CONNECTION_LOST' && err.code !== 'ANSWER_LOST') s.refused(m, err)
    })
    if (signal) {
      const onAbort = () => m.handle.kill()
      signal.addEventListener('abort', onAbort, { once: true })
      m.done.then(() => signal.removeEventListener('abort', onAbort))
    }
    return m.handle
  }

  get(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    // The resolver has no processes: its answer for an id the mirror does
    // not have (undefined, or the error for one that is not a string) is
    // the local face's.
    return m ? m.handle : this.#s.resolver.get(id)
  }

  ownerOf(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.owner : this.#s.resolver.ownerOf(id)
  }

  list() {
    return [...this.#s.procs.values()].map((m) => m.handle)
  }

  readOutput(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.read() : this.#s.resolver.readOutput(id)
  }

  kill(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.handle.kill() : this.#s.resolver.kill(id)
  }

  forget(id) {
    const s = this.#s
    const m = typeof id === 'string' ? s.procs.get(id) : undefined
    if (!m) return s.resolver.forget(id)
    if (!m.settled) {
      throw coded('STILL_RUNNING', `background process ${quoted(id)} is still running: kill it and wait for it first`)
    }
    s.procs.delete(id)
    s.discard(m)
    s.fire('forget', { id })
  }

  onTaskDone(listener) {
    if (typeof listener !== 'function') throw invalid('listener', `must be a function, got ${describe(listener)}`)
    const listeners = this.#s.listeners
    // One entry per subscription, so the same function may be added twice.
    const entry = (p) => listener(p)
    listeners.add(entry)
    return () => {
      listeners.delete(entry)
    }
  }

  /**
   * Starts a terminal session on the server (`terminal_spawn`) and resolves
   * with its handle once it runs. The request is checked here first by the
   * local face's rules (its errors name `request.*`); `request.signal`
   * cancels the allocation only, as locally: already aborted, nothing is
   * sent.
   */
  async spawnTerminal(request) {
    const s = this.#s
    checkObject(request, 'request')
    const signal = checkSignal(request.signal, 'request.signal')
    // As locally, only an abort before the call counts: the check below
    // answers after a turn of the event loop.
    const abortedAtCall = signal?.aborted === true
    // The local resolver judges the request and spawns nothing: an
    // already-fired signal stops it right after the check.
    let aborted
    try {
      await s.resolver.spawnTerminal({ ...request, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR') throw err
      aborted = err
    }
    if (abortedAtCall) throw aborted ?? coded('ABORT_ERR', 'cancelled before the command started')
    if (s.disposed) throw coded('DISPOSED', 'executor is disposed')
    const id = `term-${s.nextTerm + 1}`
    // What cannot be sent throws here and takes no id.
    const send = s.conn.prepare('terminal_spawn', { request: wireTerminalRequest(request), id })
    s.nextTerm += 1
    const m = new TerminalMirror(s, id, s.effective.max_output_bytes)
    s.terms.set(id, m)
    let answer
    try {
      answer = await send().catch(async (err) => {
        // Its answer lost with a dropped connection: the session may have
        // been made; it is looked up by the id chosen here.
        if (err.code !== 'ANSWER_LOST') throw err
        const found = await s.conn.call('terminal_get', { id }).catch(() => undefined)
        if (found === undefined) throw err
        return found
      })
    } catch (err) {
      s.terms.delete(id)
      m.abandon()
      // The server names the request's fields `terminal.*`: the local face names them `request.*`.
      if (typeof err.field === 'string' && err.field.startsWith('terminal.')) {
        const field = `request.${err.field.slice('terminal.'.length)}`
        if (err.message.startsWith(err.field)) err.message = field + err.message.slice(err.field.length)
        err.field = field
      }
      throw err
    }
    m.apply(answer.terminal)
    m.handle = new RemoteTerminalHandle(HANDLE, s, m, answer.terminal.pid)
    m.spawned = true
    m.pump()
    return m.handle
  }

  dispose() {
    this.#disposing ??= this.#dispose()
    this.#s.disposal ??= this.#disposing
    return this.#disposing
  }

  /**
   * After the server's dispose, which ended every terminal session: their
   * exit facts (and survivors) are asked for, and what they printed last is
   * read, as a local handle keeps it; a server that never ends an output
   * holds the dispose CLOSE_LIMIT_MS at most.
   */
  async #endTerminals() {
    const s = this.#s
    const terms = [...s.terms.values()].filter((t) => t.spawned)
    await Promise.all(
      terms.map(async (t) => {
        try {
          t.apply((await s.conn.call('terminal_get', { id: t.id })).terminal)
        } catch (err) {
          if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
        }
      }),
    )
    let timer
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, CLOSE_LIMIT_MS)
    })
    await Promise.race([Promise.all(terms.map((t) => t.drain())), late])
    clearTimeout(timer)
  }

  async #dispose() {
    const s = this.#s
    s.disposed = true
    const local = s.resolver.dispose()
    if (s.conn.lostReason === undefined) {
      try {
        await s.conn.call('dispose', {}).catch((err) => {
          // Its answer lost with a dropped connection, the session resumed
          // since: the server never had it (a disposal refuses the token
          // at once), so it is sent again.
          if (err.code === 'ANSWER_LOST') return s.conn.call('dispose', {})
          throw err
        })
        // The disposal settled what still ran without telling (its
        // completions are not delivered): the registry says how each ended.
        const { processes } = await s.conn.call('list', {})
        const now = new Map(processes.map((p) => [p.id, p]))
        for (const m of [...s.procs.values()]) {
          // Retired by a settling the disposal caused: gone there, gone here.
          if (!now.has(m.id) && m.settled && !m.refusedHere) {
            s.procs.delete(m.id)
            s.discard(m)
          }
        }
        for (const m of [...s.procs.values(), ...s.pending.values()]) {
          if (m.settled) continue
          m.quiet = true
          const p = now.get(m.id)
          if (p?.settled) {
            s.settle(m, p)
            s.pumpBoth(m)
            s.finish(m)
          }
        }
        await Promise.allSettled([...s.runs])
        await Promise.all([...s.procs.values()].filter((m) => m.settled).map((m) => m.done))
        // Its spill files went with it: reads say so from now on.
        const refreshed = []
        for (const m of s.procs.values()) {
          for (const [name, st] of Object.entries(m.streams)) {
            if (st.spillPath == null || m.discarded) continue
            refreshed.push(
              s.conn.call('read_from', { id: m.id, stream: name, from: st.end }).then(
                (r) => {
                  st.spillPath = r.spill_path
                  st.spillError = r.spill_error
                },
                () => {},
              ),
            )
          }
        }
        await Promise.all(refreshed)
        await this.#endTerminals()
      } catch (err) {
        if (err.code !== 'CONNECTION_LOST') throw err
      } finally {
        await s.conn.close()
        // Anything the server could not say settles as a lost connection would.
        s.lost()
      }
    }
    await local
  }
}
