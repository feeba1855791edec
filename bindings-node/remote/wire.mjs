// dsh-native/remote's translation between the protocol and the local
// face: the server's errors (and those this side makes itself) shaped as
// NativeShellExecutor's, configs, specs and results between camelCase and
// the protocol's keys, and the arguments checked as index.js checks them.
// No state and no I/O: every other part of dsh-native/remote uses it.

import { createRequire } from 'node:module'

const { WriteQueue } = createRequire(import.meta.url)('../write-queue.js')

// ----------------------------------------------------------------- errors

export function describe(value) {
  return value === null ? 'null' : typeof value
}

/** An INVALID_ARGUMENT error shaped like the local face's own (index.js). */
export function invalid(field, problem) {
  const err = new TypeError(`${field} ${problem}`)
  err.code = 'INVALID_ARGUMENT'
  err.field = field
  return err
}

export function coded(code, message, extra) {
  const err = new Error(message)
  err.code = code
  if (extra) Object.assign(err, extra)
  return err
}

/** A write not sent because one before it to `id` was lost with a connection. */
export function notSentBehind(method, id) {
  return coded(
    'ANSWER_LOST',
    `dsh-native/remote: ${method} to ${id} was not sent: an earlier write to it was lost with the connection, and this one would have reached it out of order`,
  )
}

/**
 * The write queue of a remote stream (a stdin, a terminal's input): a
 * write lost with the connection (ANSWER_LOST) has those queued behind it
 * refused with `notSentBehind(method, id())` instead of sent, since they
 * would arrive out of order.
 */
export function remoteWriteQueue(method, id) {
  return new WriteQueue({ losesQueue: (err) => err?.code === 'ANSWER_LOST', refusal: () => notSentBehind(method, id()) })
}

/** The core's STDIN_CLOSED error, for what the mirror knows itself. */
export function stdinClosed(id, reason) {
  const why = {
    'not-piped': 'it was not started with a stdin pipe',
    closed: 'its stdin was closed by close_stdin',
    exited: 'it has exited',
  }[reason]
  return coded('STDIN_CLOSED', `cannot write to the stdin of ${id}: ${why}`, { id, reason })
}

/** An INVALID_ARGUMENT error as the addon throws it (an Error, not a TypeError): for what the core itself would refuse. */
export function refused(field, problem) {
  return coded('INVALID_ARGUMENT', `${field} ${problem}`, { field })
}

// The core's TERMINAL_CLOSED messages, for what a terminal handle knows itself.
export const INPUT_GONE = "the terminal's program has exited: its input cannot be written"
export const NO_FOREGROUND = 'the terminal has no foreground process group (its program has exited)'
export const RESIZE_AFTER_EXIT = "the terminal's program has exited: it cannot be resized"

/** The signals a terminal's foreground group can be sent, in the core's order (its message lists them so). */
export const TERMINAL_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGTSTP', 'SIGHUP']

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
export function dimensionProblem(v) {
  if (!Number.isFinite(v) || v <= 0) return `must be a positive finite number, got ${rustNumber(v)}`
  if (!Number.isInteger(v)) return `must be a whole number, got ${rustNumber(v)}`
  if (v > 65535) return `must be no greater than 65535, got ${rustNumber(v)}`
  return undefined
}

/** A string as Rust's `{:?}` shows it in the core's messages (`"bash-1"`). */
export function quoted(s) {
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
export function fromRpcError(error) {
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

export function isObject(v) {
  return v !== null && typeof v === 'object'
}

/** A checked config for the wire: only the keys with a value. */
export function wireConfig(config) {
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
export function resolverConfig(effective, hostCwd) {
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
export function withoutSpillDir(config) {
  if (!isObject(config) || config.spillDir === undefined) return config
  const { spillDir: _, ...rest } = config
  return rest
}

/**
 * A relative path taken against the server's cwd, as the server would take
 * it: both sides then make the same absolute path of the same text.
 */
export function onServer(hostCwd, p) {
  return p.startsWith('/') || typeof hostCwd !== 'string' ? p : `${hostCwd}/${p}`
}

/** Whether two absolute paths name the same place as Rust compares paths (by components: `.` and repeated or trailing slashes aside). */
export function samePath(a, b) {
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
export function wireSpec(spec) {
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
export function wireTerminalRequest(request) {
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
export function sandboxInfo(s) {
  if (!isObject(s)) return undefined
  const out = { mode: s.mode, denied: s.denied }
  if (s.enforcement != null) out.enforcement = s.enforcement
  out.metadata = s.metadata
  if (s.runner_failed != null) out.runnerFailed = s.runner_failed
  if (s.network != null && s.network !== 'allow') out.network = s.network
  if (s.network_enforcement != null) out.networkEnforcement = s.network_enforcement
  return out
}

export function enforcement(e) {
  return isObject(e) && Object.keys(e).length > 0 ? { ...e } : undefined
}

function collected(o) {
  const out = { text: o.text, truncated: o.truncated }
  if (o.spill_path != null) out.spillPath = o.spill_path
  if (o.spill_error != null) out.spillError = o.spill_error
  return out
}

/** A run result in the ShellRunResult shape NativeShellExecutor gives (index.js `runResult`). */
export function runResult(r) {
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
export function checkSignal(signal, field) {
  if (signal === undefined) return undefined
  const isSignal =
    (typeof AbortSignal === 'function' && signal instanceof AbortSignal) ||
    (signal !== null && typeof signal === 'object' && typeof signal.aborted === 'boolean' && typeof signal.addEventListener === 'function')
  if (!isSignal) throw invalid(field, `must be an AbortSignal, got ${describe(signal)}`)
  return signal
}

export function checkObject(value, field) {
  if (value === null || typeof value !== 'object') throw invalid(field, `must be an object, got ${describe(value)}`)
}

/** run()'s options checked: its `onOutput` callback, or undefined. */
export function checkRunOptions(options) {
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
export function checkTransport(transport) {
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
export function wellFormed(_key, value) {
  return typeof value === 'string' ? wellFormedText(value) : value
}
