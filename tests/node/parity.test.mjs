// Parity with the real thing: every case runs through the published
// JavaScript executor (`@deepseek-ai/dsh-bash-local` over
// `@deepseek-ai/dsh-subprocess-local`) and through the native plugin (over
// the same published subprocess runtime), each in a Context of its own, and
// the two normalized outcomes are compared field by field.
//
// A case either matches exactly, or names the documented difference it
// shows (`differs.id`, a section of docs/compat.md) and pins down what each
// side does. The doc and this table are checked against each other at the
// end, so neither can drift from the other.
//
// Every case also runs through the native plugin over the protocol
// (`transport: dsh serve --stdio`, dsh-native/remote), whose outcome must
// be the local native plugin's, in a subtest of its own ("remote = native")
// that says why when it cannot run.

import test, { after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { createRequire } from 'node:module'
import { seam, seamUrl, harnessUrl } from './seam.mjs'
import { shellQuote, sshdMissing, startSshd } from './sshd.mjs'

const { alive, eventually } = createRequire(import.meta.url)('./helpers.js')

const { Context } = await seam('@deepseek-ai/cordis')
const { default: LocalSubprocessRuntime } = await seam('@deepseek-ai/dsh-subprocess-local')
const { default: LocalBashExecutor } = await seam('@deepseek-ai/dsh-bash-local')
const { default: NativeShellPlugin } = await import(harnessUrl)

const EXECUTORS = { published: LocalBashExecutor, native: NativeShellPlugin, remote: NativeShellPlugin }
const EXECUTOR_URLS = { published: seamUrl('@deepseek-ai/dsh-bash-local'), native: harnessUrl, remote: harnessUrl }

/** The server the remote side talks to: `dsh serve --stdio` of this checkout's build (or DSH_BIN). */
const DSH_BIN = process.env.DSH_BIN ?? fileURLToPath(new URL('../../target/debug/dsh', import.meta.url))
/** Why the remote side cannot run here, or undefined when it can. */
const REMOTE_MISSING = fs.existsSync(DSH_BIN) ? undefined : `no dsh binary at ${DSH_BIN} (cargo build -p dsh-cli --bin dsh, or set DSH_BIN)`
/**
 * How the remote side reaches its server: over a real ssh connection to an
 * sshd of the test's own where one can run (DSH_PARITY_REMOTE=stdio, or no
 * sshd: a pipe to `dsh serve --stdio`).
 */
const REMOTE_VIA = process.env.DSH_PARITY_REMOTE ?? (sshdMissing() ? 'stdio' : 'ssh')
const SSHD = REMOTE_VIA === 'ssh' && !REMOTE_MISSING ? await startSshd() : undefined
if (REMOTE_VIA !== 'ssh') console.log(`# parity: the remote side over a pipe, not ssh: ${process.env.DSH_PARITY_REMOTE ? 'DSH_PARITY_REMOTE=stdio' : sshdMissing()}`)
/**
 * The transport, made when a composition is: over ssh, the server gets this
 * process's environment as it is then (sshd would give it its own), so the
 * cases that set host variables see them on the far side too.
 */
function remoteTransport() {
  if (!SSHD) return { command: [DSH_BIN, 'serve', '--stdio'] }
  const env = Object.entries(process.env).map(([k, v]) => shellQuote(`${k}=${v}`))
  return { command: SSHD.argv(`env -i ${env.join(' ')} ${shellQuote(DSH_BIN)} serve --stdio`) }
}
/** The config a side's plugin is loaded with: the remote one talks to a server. */
const pluginConfig = (impl, config) => (impl === 'remote' ? { ...config, transport: remoteTransport() } : config)

// ---------------------------------------------------------------- fixtures

/** Every composition's default cwd; holds a directory a relative workdir names. */
const BASE = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-parity-'))
const SUBDIR = `parity-sub-${process.pid}`
fs.mkdirSync(path.join(BASE, SUBDIR))
/** graceMs small enough to keep escalation cases short. */
const BASE_CONFIG = { cwd: BASE, graceMs: 300 }

const contexts = new Map()
const publishedSpillDirs = new Set()

// DSH_PARITY_SUBPROCESS=native composes both executors over our
// `ctx.subprocess` (dsh-native/subprocess) instead of the published one:
// the published executor is then a consumer of our provider, and the
// differences that came from its provider (these) are gone.
const OVER_NATIVE = process.env.DSH_PARITY_SUBPROCESS === 'native'
const SUBPROCESS = OVER_NATIVE
  ? (await import(new URL('../../bindings-node/subprocess.mjs', import.meta.url).href)).default
  : LocalSubprocessRuntime
const FROM_THE_PROVIDER = new Set(['stdio-pipes', 'tree-kill', 'utf8-boundary'])
// Differences that change shape over our provider: each side's value checked.
const OVER_OUR_PROVIDER = {
  // Both carry a tag now (each executor its own).
  'exec-tag': (native, published) => {
    assert.match(published.DSH_EXEC_TAG, /^\S+$/)
    const { DSH_EXEC_TAG: a, ...n } = native
    const { DSH_EXEC_TAG: b, ...p } = published
    assert.deepEqual(n, p)
  },
  // The published executor prints our provider's error after its own words.
  'spawn-failure-text': (native, published) => {
    const reason = native.read.delta.replace('[stderr]\nspawn failed: ', '').trim()
    assert.equal(published.read.delta, `[stderr]\nspawn failed: Error: spawn failed: ${reason}`)
    assert.deepEqual({ ...published, read: undefined }, { ...native, read: undefined })
  },
}

async function compose(impl, config) {
  const root = new Context()
  await root.plugin(SUBPROCESS)
  // A plugin whose constructor throws rejects here, for both executors.
  await root.plugin(EXECUTORS[impl], pluginConfig(impl, config))
  return root
}

/**
 * One composition per (executor, config), shared by the cases using it. A
 * server sees the environment it was started with, so a case that sets
 * this process's variables (`hostEnv`) gets a server of its own, started
 * while they are set.
 */
async function shellFor(impl, config, hostEnv) {
  const env = impl === 'remote' && hostEnv ? ` ${JSON.stringify(hostEnv)}` : ''
  const key = `${impl} ${JSON.stringify(config)}${env}`
  if (!contexts.has(key)) contexts.set(key, compose(impl, config))
  return (await contexts.get(key)).shell
}

after(async () => {
  for (const root of contexts.values()) await (await root).fiber.dispose()
  for (const dir of publishedSpillDirs) fs.rmSync(dir, { recursive: true, force: true })
  fs.rmSync(BASE, { recursive: true, force: true })
})

// ----------------------------------------------------------------- helpers

/** Resolves once `file` exists: an fs.watch event, not a sleep. */
function fileAppears(file) {
  return new Promise((resolve) => {
    const watcher = fs.watch(path.dirname(file), () => {
      if (fs.existsSync(file)) {
        watcher.close()
        resolve()
      }
    })
    if (fs.existsSync(file)) {
      watcher.close()
      resolve()
    }
  })
}

/** Reads a background process until `needle` has arrived; returns what was read. */
async function readUntil(proc, needle) {
  let seen = ''
  const ok = await eventually(() => {
    seen += proc.readOutput().delta
    return seen.includes(needle)
  })
  if (!ok) throw new Error(`never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
  return seen
}

/** `env` output as an object (the child's whole environment). */
function parseEnv(text) {
  const env = {}
  for (const line of text.split('\0')) {
    if (line === '') continue
    const eq = line.indexOf('=')
    env[line.slice(0, eq)] = line.slice(eq + 1)
  }
  return env
}

/** Sets host variables for the duration of `fn`, then restores them. */
async function withHostEnv(vars, fn) {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]))
  for (const [k, v] of Object.entries(vars)) {
    if (v === undefined) delete process.env[k]
    else process.env[k] = v
  }
  try {
    return await fn()
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
}

const aaa = (n) => `head -c ${n} /dev/zero | tr '\\0' a`
const seqText = (n) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join('')

// ------------------------------------------------------------ normalization

// Only what must differ is normalized away:
// - spill paths: each implementation names its files in its own private
//   directory, so the path must differ; what must not differ is what the
//   file holds, the complete stream, so a path becomes its file's contents.
// - the native extra fields (docs/compat.md, `extra-fields`): results and
//   reads carry facts the published shapes do not have. They are taken out
//   and listed, and every case states which ones it expects.
// - an AbortSignal in a resolved spec: compared by identity below, shown as
//   a marker.
const SPILL_KEYS = new Set(['spillPath', 'stdoutSpillPath', 'stderrSpillPath'])
const NATIVE_EXTRAS = ['backgroundId', 'exitStatusUnavailable', 'survivors', 'spillError', 'stdoutSpillError', 'stderrSpillError', 'task']

function normalize(value, extras, impl) {
  if (Array.isArray(value)) return value.map((v) => normalize(v, extras, impl))
  if (value instanceof AbortSignal) return '<AbortSignal>'
  if (value === null || typeof value !== 'object' || Buffer.isBuffer(value)) return value
  const out = {}
  for (const [key, v] of Object.entries(value)) {
    if (NATIVE_EXTRAS.includes(key)) {
      extras.add(key)
    } else if (SPILL_KEYS.has(key)) {
      if (impl === 'published') publishedSpillDirs.add(path.dirname(v))
      out[key] = { spillContents: fs.existsSync(v) ? fs.readFileSync(v, 'utf8') : '<missing file>' }
    } else {
      out[key] = normalize(v, extras, impl)
    }
  }
  return out
}

/**
 * A rejection, reduced to what both sides can be held to: that it rejected,
 * the field it names (the published executor names it only in its message,
 * `bash-local: request.timeoutMs must be …`), and an errno-style code. The
 * wording is not compared.
 */
function rejection(e) {
  let field = e?.field ?? null
  const m = /bash-local: ([\w.]+) must/.exec(e?.message ?? '')
  if (field === null && m) field = m[1].includes('.') ? m[1] : `config.${m[1]}`
  const code = typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code) ? e.code : null
  return { rejected: true, field, code }
}

// -------------------------------------------------------------------- cases

/**
 * A case: `request` (resolved and run in the foreground) or `exec(h)` (any
 * flow; `h` has `shell` — the composition for the case's config — `dir` — a
 * fresh directory per side — and `impl`, for cases that compose their own).
 * Options: `config` (merged over BASE_CONFIG), `hostEnv` (process.env for
 * the duration), `rejects` (true: both reject, naming the same field and
 * errno; 'any': both reject, nothing else compared; absent: neither may),
 * `extras` (the native extra fields this case shows), `expect` (the
 * published outcome, pinned), `differs` ({ id, published, native }: a
 * documented difference, each side checked by a function).
 */
const CASES = []
const add = (c) => CASES.push(c)

// Exit codes.
add({ name: 'exit 0', request: { command: 'true' }, expect: { exitCode: 0, signal: null, timedOut: false, aborted: false, timeoutMs: 120000, stdout: { text: '', truncated: false }, stderr: { text: '', truncated: false } } })
add({ name: 'exit 1', request: { command: 'false' } })
add({ name: 'exit 2 with stderr', request: { command: 'echo usage >&2; exit 2' } })
add({ name: 'exit 126: not executable', request: { command: '/etc/passwd' } })
add({ name: 'exit 127: command not found', request: { command: 'no-such-command-dsh-parity' } })
add({ name: 'exit 255', request: { command: 'exit 255' } })
add({ name: 'exit 256 wraps to 0, exit -1 to 255', exec: async ({ shell }) => [await shell.run(shell.resolve({ command: 'exit 256' })), await shell.run(shell.resolve({ command: 'exit -1' }))] })

// Signals.
add({ name: 'self-kill with SIGKILL', request: { command: 'echo before; kill -KILL $$' } })
add({ name: 'self-kill with SIGTERM', request: { command: 'kill -TERM $$' } })
add({ name: 'self-kill with SIGINT', request: { command: 'kill -INT $$' } })
add({ name: 'self-kill with SIGHUP', request: { command: 'kill -HUP $$' } })
add({ name: 'signal of a child is an exit status of 128+n', request: { command: 'sh -c "kill -TERM \\$\\$"' } })

// Output text.
add({ name: 'empty output', request: { command: ':' } })
add({ name: 'output without a trailing newline', request: { command: 'printf abc; printf def >&2' } })
add({ name: 'multibyte UTF-8 passes through', request: { command: "printf 'héllo 😀 世界\\n'; printf 'ünï\\n' >&2" } })
add({ name: 'invalid UTF-8 and NUL bytes', request: { command: "printf '\\377\\376a\\0b\\r\\n'" } })
add({ name: 'stdout and stderr kept apart', request: { command: 'for i in 1 2 3; do echo out$i; echo err$i >&2; done' } })

// Output caps, truncation and spill files.
const CAP = { maxOutputBytes: 1000 }
add({ name: 'stdout one byte under the cap', config: CAP, request: { command: aaa(999) } })
add({ name: 'stdout exactly at the cap', config: CAP, request: { command: aaa(1000) } })
add({ name: 'stdout one byte over the cap: tail + spill file', config: CAP, request: { command: aaa(1001) } })
add({ name: 'stderr over the cap: tail + spill file', config: CAP, request: { command: `seq 1 2000 >&2` } })
add({ name: 'large stdout (1.2 MB) at the default cap', request: { command: 'seq 1 200000' } })
add({ name: 'stdoutMaxBytes below the cap keeps a shorter stdout tail', config: CAP, request: { command: 'seq 1 100; seq 1 100 >&2', stdoutMaxBytes: 50 } })
add({ name: 'spill file exactly at maxSpillBytes is kept', config: { maxOutputBytes: 100, maxSpillBytes: 5000 }, request: { command: aaa(5000) } })
add({
  name: 'spill file past maxSpillBytes is dropped (native says why)',
  config: { maxOutputBytes: 100, maxSpillBytes: 5000 },
  request: { command: aaa(5001) },
  extras: ['spillError'],
})
// The seam lets a foreground caller raise stdout's budget, not stderr's.
add({
  name: 'stdoutMaxBytes above maxOutputBytes raises stdout only',
  config: CAP,
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: `${aaa(1500)}; seq 1 1000 >&2`, stdoutMaxBytes: 2000 }))
    return { stdout: r.stdout, stderr: { length: r.stderr.text.length, truncated: r.stderr.truncated } }
  },
  expect: { stdout: { text: 'a'.repeat(1500), truncated: false }, stderr: { length: 1000, truncated: true } },
})
add({ name: 'stdoutMaxBytes above maxOutputBytes, still exceeded: tail + spill file', config: CAP, request: { command: aaa(2500), stdoutMaxBytes: 2000 } })
add({
  name: 'UTF-8 at the truncation boundary (foreground tail)',
  request: { command: "for i in $(seq 400); do printf '\\303\\251'; done", stdoutMaxBytes: 11 },
  differs: {
    id: 'utf8-boundary',
    published: (r) => assert.equal(r.stdout.text, '\uFFFDééééé'),
    native: (r) => assert.equal(r.stdout.text, 'ééééé'),
  },
})

// stdin.
add({ name: 'stdin text is written then closed', request: { command: 'cat; echo; cat', stdin: 'héllo' } })
add({ name: 'stdin without a trailing newline, read by read -r', request: { command: 'read -r x; echo "[$x] rc=$?"', stdin: 'no newline' } })
add({ name: 'no stdin: /dev/null', request: { command: 'readlink /proc/self/fd/0; cat; echo rc=$?' } })
add({ name: 'stdin of 1 MiB', request: { command: 'wc -c', stdin: 'x'.repeat(1 << 20) } })
add({ name: 'stdin the command never reads', request: { command: 'exit 7', stdin: 'y'.repeat(1 << 20) } })
add({ name: 'stdin as a Buffer', request: { command: 'od -An -tx1', stdin: Buffer.from([0, 1, 2, 255]) } })

// The environment the child sees.
const HOST_ENV = {
  MY_API_KEY: 'leak-1',
  GITHUB_TOKEN: 'leak-2',
  db_password: 'leak-3',
  AWS_SECRET_ACCESS_KEY: 'leak-4',
  MONKEY_BUSINESS: 'leak-5',
  tokenizer_path: 'leak-6',
  DSH_STALE_SESSION: 'leak-7',
  dsh_lower: 'leak-8',
  DSHX: 'kept-1',
  Passwd: 'kept-2',
  PLAIN_SETTING: 'kept-3',
  TERM: 'xterm-256color',
  PAGER: 'less',
  GIT_PAGER: 'delta',
  NO_COLOR: undefined,
}
add({
  name: 'environment: credential scrub, ambient DSH_* removed, forced terminal settings',
  hostEnv: HOST_ENV,
  exec: async ({ shell }) => parseEnv((await shell.run(shell.resolve({ command: 'env -0' }))).stdout.text),
  differs: {
    id: 'exec-tag',
    published: (env) => {
      for (const k of ['MY_API_KEY', 'GITHUB_TOKEN', 'db_password', 'AWS_SECRET_ACCESS_KEY', 'MONKEY_BUSINESS', 'tokenizer_path', 'DSH_STALE_SESSION', 'dsh_lower']) assert.equal(env[k], undefined, k)
      assert.deepEqual([env.DSHX, env.Passwd, env.PLAIN_SETTING], ['kept-1', 'kept-2', 'kept-3'])
      assert.deepEqual([env.NO_COLOR, env.TERM, env.PAGER, env.GIT_PAGER], ['1', 'dumb', 'cat', 'cat'])
      assert.equal(env.DSH_EXEC_TAG, undefined)
    },
    // Everything else is the same environment, variable for variable.
    native: (env, published) => {
      assert.match(env.DSH_EXEC_TAG, /^\S+$/)
      const { DSH_EXEC_TAG, ...rest } = env
      assert.deepEqual(rest, published)
    },
  },
})
add({
  name: 'environment: env overrides the scrub and the forced settings',
  hostEnv: HOST_ENV,
  request: { command: 'echo "$PAGER $TERM $NO_COLOR $GITHUB_TOKEN $DSH_FROM_ENV $PLAIN_SETTING"', env: { PAGER: 'more', TERM: 'xterm', NO_COLOR: '0', GITHUB_TOKEN: 'explicit', DSH_FROM_ENV: 'via-env' } },
  expect: { exitCode: 0, signal: null, timedOut: false, aborted: false, timeoutMs: 120000, stdout: { text: 'more xterm 0 explicit via-env kept-3\n', truncated: false }, stderr: { text: '', truncated: false } },
})
add({
  name: 'environment: dshEnv wins over env; ambient DSH_* never seen',
  hostEnv: { DSH_SESSION_ID: 'stale', DSH_OTHER: 'stale' },
  request: { command: 'echo "$DSH_SESSION_ID|$DSH_X|${DSH_OTHER-unset}"', env: { DSH_X: 'from-env', DSH_SESSION_ID: 'from-env' }, dshEnv: { DSH_X: 'managed', DSH_SESSION_ID: 'session-1' } },
})
add({ name: 'environment: an empty value is a value', request: { command: 'echo "[${EMPTY-unset}]"', env: { EMPTY: '' } } })
add({
  name: 'environment: an undefined env value',
  hostEnv: { PARITY_INHERITED: 'inherited' },
  request: { command: 'echo "[${PARITY_INHERITED-unset}]"', env: { PARITY_INHERITED: undefined } },
  differs: {
    id: 'env-undefined',
    // Handed to the subprocess seam, where undefined is a tombstone.
    published: (r) => assert.equal(r.stdout.text, '[unset]\n'),
    native: (r) => assert.equal(r.stdout.text, '[inherited]\n'),
  },
})

// Working directory.
add({ name: 'workdir: the configured cwd by default', request: { command: 'pwd' } })
add({ name: 'workdir: absolute', exec: async ({ shell, dir }) => shell.run(shell.resolve({ command: 'pwd', workdir: dir })).then((r) => r.stdout.text === `${dir}\n`), expect: true })
add({
  name: 'workdir: relative',
  exec: async ({ shell }) => {
    const spec = shell.resolve({ command: 'pwd', workdir: SUBDIR })
    return { workdir: spec.workdir, run: await shell.run(spec).catch(rejection) }
  },
  differs: {
    id: 'relative-workdir',
    // Left relative, so the spawn resolves it against the host process's
    // cwd (where this directory does not exist), not the configured cwd.
    published: (r) => assert.deepEqual(r, { workdir: SUBDIR, run: { rejected: true, field: null, code: 'ENOENT' } }),
    native: (r) => assert.equal(r.run.stdout.text, `${path.join(BASE, SUBDIR)}\n`),
  },
})
add({ name: 'workdir: missing directory rejects with ENOENT', request: { command: 'true', workdir: '/nonexistent/dsh-parity' }, rejects: true })
add({ name: 'workdir: a file rejects with ENOTDIR', request: { command: 'true', workdir: '/etc/passwd' }, rejects: true })

// The process the command runs as.
add({
  name: 'the command leads a session of its own',
  exec: async ({ shell }) => {
    const [sid, pid] = (await shell.run(shell.resolve({ command: 'ps -o sid= -p $$ | tr -d " "; echo $$' }))).stdout.text.trim().split('\n')
    return sid === pid
  },
  expect: true,
})
// Read by a process bash execs in its place: bash's own mask changes while
// it forks, so reading it from a child would race with that.
add({
  name: 'signal dispositions and mask are defaults; $0 is bash',
  request: { command: 'echo $0; exec grep -E "^Sig(Blk|Ign)" /proc/self/status' },
  expect: { exitCode: 0, signal: null, timedOut: false, aborted: false, timeoutMs: 120000, stdout: { text: 'bash\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n', truncated: false }, stderr: { text: '', truncated: false } },
})
add({
  name: 'stdout and stderr are pipes',
  request: { command: 'echo via-dev-stdout > /dev/stdout; [ -p /dev/stdout ] && echo pipe || echo not-a-pipe' },
  differs: {
    id: 'stdio-pipes',
    published: (r) => {
      assert.equal(r.stdout.text, 'not-a-pipe\n')
      assert.match(r.stderr.text, /\/dev\/stdout: No such device or address/)
    },
    native: (r) => assert.deepEqual([r.exitCode, r.stdout.text, r.stderr.text], [0, 'via-dev-stdout\npipe\n', '']),
  },
})
add({
  name: 'descriptors: only 0, 1 and 2 reach the command',
  exec: ({ impl }) => descriptorsSeenFromHost(impl),
  differs: {
    id: 'descriptors',
    // The host here holds an inheritable fd 20 (as a host may: one its own
    // parent passed it); the published spawn hands it to every command.
    published: (fds) => assert.ok(fds.includes('20'), fds.join(' ')),
    native: (fds) => assert.deepEqual(fds, ['0', '1', '2']),
  },
})

// Timeouts.
add({ name: 'timeout: SIGTERM ends the command', request: { command: 'echo before; sleep 30', timeoutMs: 300 } })
add({ name: 'timeout: a command ignoring SIGTERM gets SIGKILL after graceMs', request: { command: "trap '' TERM; echo armed; sleep 30", timeoutMs: 300 } })
add({ name: 'timeout: a TERM trap runs, then SIGKILL', request: { command: "trap 'echo got-term' TERM; while :; do sleep 0.05; done", timeoutMs: 300 } })
add({
  name: 'timeout: a TERM trap that exits 0 is still timed out',
  request: { command: "trap 'echo bye; exit 0' TERM; echo armed; sleep 30 & wait", timeoutMs: 300 },
  expect: { exitCode: 0, signal: null, timedOut: true, aborted: false, timeoutMs: 300, stdout: { text: 'armed\nbye\n', truncated: false }, stderr: { text: '', truncated: false } },
})
add({ name: 'timeout: a request above maxTimeoutMs is capped', config: { maxTimeoutMs: 300, timeoutMs: 300 }, request: { command: 'sleep 30', timeoutMs: 100000 } })
add({ name: 'timeout: the configured default', config: { timeoutMs: 250 }, request: { command: 'sleep 30' } })
add({ name: 'timeout: a command that ends first is not timed out', request: { command: 'echo quick', timeoutMs: 60000 } })
add({
  name: 'timeout: longer than a Node timer can hold',
  config: { maxTimeoutMs: 2 ** 32 },
  request: { command: 'echo ran', timeoutMs: 2 ** 31 },
  differs: {
    id: 'long-timeout',
    published: (r) => assert.deepEqual(r, { rejected: true, field: null, code: null }),
    native: (r) => assert.deepEqual([r.exitCode, r.stdout.text, r.timeoutMs], [0, 'ran\n', 2 ** 31]),
  },
})
add({
  name: 'timeout: a fractional request',
  exec: async ({ shell }) => shell.resolve({ command: 'true', timeoutMs: 150.5 }).timeoutMs,
  differs: { id: 'fractional-timeout', published: (t) => assert.equal(t, 150.5), native: (t) => assert.equal(t, 151) },
})
add({
  name: 'timeout: a setsid descendant dies with the tree',
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: 'setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!; sleep 30', timeoutMs: 300 }))
    const pid = Number(r.stdout.text)
    const gone = await eventually(() => !alive(pid), 2000)
    if (!gone) process.kill(pid, 'SIGKILL')
    return { timedOut: r.timedOut, signal: r.signal, descendantSurvived: !gone }
  },
  differs: {
    id: 'tree-kill',
    published: (r) => assert.deepEqual(r, { timedOut: true, signal: 'SIGTERM', descendantSurvived: true }),
    native: (r) => assert.deepEqual(r, { timedOut: true, signal: 'SIGTERM', descendantSurvived: false }),
  },
})
add({
  name: 'a background job of the command outlives a normal exit',
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: 'sleep 30 </dev/null >/dev/null 2>&1 & echo $!' }))
    const pid = Number(r.stdout.text)
    const survived = alive(pid)
    if (survived) process.kill(pid, 'SIGKILL')
    return { exitCode: r.exitCode, survived }
  },
  expect: { exitCode: 0, survived: true },
})

add({
  name: 'a background job holding stdout does not hold the run past graceMs',
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: 'sleep 30 & echo $!; echo more' }))
    const [pid, more] = r.stdout.text.split('\n')
    process.kill(Number(pid), 'SIGKILL')
    return { exitCode: r.exitCode, more, timedOut: r.timedOut }
  },
  expect: { exitCode: 0, more: 'more', timedOut: false },
})

// AbortSignal.
add({
  name: 'abort before the run: rejected, nothing runs',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    ac.abort()
    const marker = path.join(dir, 'ran')
    const outcome = await shell.run(shell.resolve({ command: `touch ${marker}`, signal: ac.signal })).catch(rejection)
    return { outcome, ran: fs.existsSync(marker) }
  },
  expect: { outcome: { rejected: true, field: null, code: null }, ran: false },
})
add({
  name: 'abort during the run',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    const started = path.join(dir, 'started')
    const pending = shell.run(shell.resolve({ command: `echo up; touch ${started}; sleep 30`, signal: ac.signal }))
    await fileAppears(started)
    ac.abort()
    return pending
  },
})
add({
  name: 'abort during the run of a command ignoring SIGTERM',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    const started = path.join(dir, 'started')
    const pending = shell.run(shell.resolve({ command: `trap '' TERM; touch ${started}; sleep 30`, signal: ac.signal }))
    await fileAppears(started)
    ac.abort()
    return pending
  },
})
// What a harness checks after cancelling a hook: the settled run has
// reaped its command (the pid answers ESRCH), on an abort, a timeout and an
// ordinary exit, and a killed background process's `done` the same.
const pidIsFree = (pid) => {
  try {
    process.kill(pid, 0)
    return false
  } catch (e) {
    return e.code === 'ESRCH'
  }
}
add({
  name: 'a settled run or process has reaped its command',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    const started = path.join(dir, 'started')
    const pending = shell.run(shell.resolve({ command: `echo $$; touch ${started}; exec sleep 30`, signal: ac.signal }))
    await fileAppears(started)
    ac.abort()
    const aborted = await pending
    const timedOut = await shell.run(shell.resolve({ command: 'echo $$; exec sleep 30', timeoutMs: 200 }))
    const exited = await shell.run(shell.resolve({ command: 'echo $$' }))
    const p = shell.start(shell.resolve({ command: 'echo $$; exec sleep 30' }))
    let seen = ''
    while (!seen.includes('\n')) {
      seen += p.readOutput().delta
      await new Promise((r) => setTimeout(r, 10))
    }
    p.kill()
    await p.done
    return [aborted, timedOut, exited].map((r) => pidIsFree(Number(r.stdout.text))).concat(pidIsFree(Number(seen)))
  },
  expect: [true, true, true, true],
})
add({
  name: 'abort after the run changes nothing',
  exec: async ({ shell }) => {
    const ac = new AbortController()
    const r = await shell.run(shell.resolve({ command: 'echo done', signal: ac.signal }))
    ac.abort()
    return r
  },
})
add({
  name: 'abort wins over a later timeout',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    const started = path.join(dir, 'started')
    const pending = shell.run(shell.resolve({ command: `touch ${started}; sleep 30`, timeoutMs: 60000, signal: ac.signal }))
    await fileAppears(started)
    ac.abort()
    return pending
  },
})

// Background processes.
add({
  name: 'background: output after exit, stderr in its section, then nothing',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'echo a; echo b >&2; printf c' }))
    const done = await p.done
    return { done, status: p.status, exitCode: p.exitCode, signal: p.signal, reads: [p.readOutput(), p.readOutput()] }
  },
  extras: ['task'],
})
add({
  name: 'background: incremental deltas never repeat',
  exec: async ({ shell, dir }) => {
    const go = path.join(dir, 'go')
    const p = shell.start(shell.resolve({ command: `echo first; while [ ! -e ${go} ]; do sleep 0.01; done; echo second; echo err >&2` }))
    const first = await readUntil(p, 'first\n')
    const empty = p.readOutput()
    fs.writeFileSync(go, '')
    await p.done
    return { first, empty, rest: p.readOutput(), after: p.readOutput() }
  },
  extras: ['task'],
})
add({
  name: 'background: a stdout delta without a newline gets one before [stderr]',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'printf abc; printf def >&2' }))
    await p.done
    return p.readOutput()
  },
  extras: ['task'],
})
add({
  name: 'background: stderr only',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'echo oops >&2; exit 3' }))
    await p.done
    return { status: p.status, exitCode: p.exitCode, read: p.readOutput() }
  },
  extras: ['task'],
})
add({
  name: 'background: kill() is true, then false; SIGTERM',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'echo up; sleep 30' }))
    await readUntil(p, 'up')
    const first = p.kill()
    const statusAfterKill = p.status
    const second = p.kill()
    await p.done
    return { first, statusAfterKill, second, status: p.status, exitCode: p.exitCode, signal: p.signal, third: p.kill() }
  },
})
add({
  name: 'background: kill() of a command ignoring SIGTERM escalates to SIGKILL',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: "trap 'echo got-term' TERM; echo armed; while :; do sleep 0.05; done" }))
    await readUntil(p, 'armed')
    const killed = p.kill()
    await p.done
    return { killed, status: p.status, signal: p.signal, read: p.readOutput() }
  },
  extras: ['task'],
})
add({
  name: 'background: kill() of a command that exits 0 on SIGTERM stays killed',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: "trap 'echo bye; exit 0' TERM; echo armed; sleep 30 & wait" }))
    await readUntil(p, 'armed')
    const killed = p.kill()
    await p.done
    return { killed, status: p.status, exitCode: p.exitCode, signal: p.signal, read: p.readOutput() }
  },
  extras: ['task'],
})
add({
  name: 'background: kill() after it exited is false and keeps completed',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'exit 4' }))
    await p.done
    return { kill: p.kill(), status: p.status, exitCode: p.exitCode }
  },
})
add({
  name: 'background: a self-kill is killed with its signal',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'kill -USR1 $$' }))
    await p.done
    return { status: p.status, exitCode: p.exitCode, signal: p.signal }
  },
})
add({
  name: 'background: AbortSignal during the run kills it',
  exec: async ({ shell }) => {
    const ac = new AbortController()
    const p = shell.start(shell.resolve({ command: 'echo up; sleep 30', signal: ac.signal }))
    await readUntil(p, 'up')
    ac.abort()
    await p.done
    return { status: p.status, signal: p.signal }
  },
})
add({
  name: 'background: an already-aborted signal refuses the start; nothing runs',
  exec: async ({ shell, dir }) => {
    const ac = new AbortController()
    ac.abort()
    const marker = path.join(dir, 'ran')
    let outcome
    try {
      const p = shell.start(shell.resolve({ command: `touch ${marker}`, signal: ac.signal }))
      await p.done
      outcome = { started: true, status: p.status }
    } catch (e) {
      outcome = rejection(e)
    }
    return { outcome, ran: fs.existsSync(marker) }
  },
  expect: { outcome: { rejected: true, field: null, code: null }, ran: false },
})
add({
  name: 'background: no timeout applies',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'sleep 0.4; echo finished', timeoutMs: 50 }))
    await p.done
    return { status: p.status, read: p.readOutput() }
  },
  extras: ['task'],
})
add({
  name: 'background: stdin is written then closed',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'cat', stdin: 'to the background' }))
    await p.done
    return p.readOutput()
  },
  extras: ['task'],
})
add({
  name: 'background: lossy stderr read names the spill file; the next read is not lossy',
  config: { maxOutputBytes: 100 },
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'seq 1 1000 >&2' }))
    await p.done
    return [p.readOutput(), p.readOutput()]
  },
  extras: ['task'],
})
add({
  name: 'background: lossy stdout read; background stdout uses the executor cap, not stdoutMaxBytes',
  config: { maxOutputBytes: 100 },
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'seq 1 1000', stdoutMaxBytes: 10 }))
    await p.done
    return [p.readOutput(), p.readOutput()]
  },
  extras: ['task'],
})
add({
  name: 'background: UTF-8 at the lossy-read boundary',
  config: { maxOutputBytes: 101 },
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: "for i in $(seq 400); do printf '\\303\\251'; done" }))
    await p.done
    return p.readOutput().delta
  },
  differs: {
    id: 'utf8-boundary',
    published: (d) => assert.equal(d, '\uFFFD' + 'é'.repeat(50)),
    native: (d) => assert.equal(d, 'é'.repeat(50)),
  },
})
add({
  name: 'background: a spawn failure settles as killed with the error on stderr',
  exec: async ({ shell }) => {
    const p = shell.start(shell.resolve({ command: 'true', workdir: '/nonexistent/dsh-parity' }))
    await p.done
    return { status: p.status, exitCode: p.exitCode, signal: p.signal, read: p.readOutput(), next: p.readOutput() }
  },
  extras: ['task'],
  differs: {
    id: 'spawn-failure-text',
    published: (r) => {
      assert.deepEqual([r.status, r.exitCode, r.signal], ['killed', null, null])
      assert.deepEqual(r.read, { delta: '[stderr]\nspawn failed: Error: spawn bash ENOENT', lossy: false })
      assert.equal(r.next.delta, '')
    },
    native: (r) => {
      assert.deepEqual([r.status, r.exitCode, r.signal], ['killed', null, null])
      assert.match(r.read.delta, /^\[stderr\]\nspawn failed: ENOENT: .*\/nonexistent\/dsh-parity/)
      assert.equal(r.next.delta, '')
    },
  },
})
add({
  name: 'background: tearing down the composition kills and awaits the process',
  exec: async ({ impl }) => {
    const root = await compose(impl, BASE_CONFIG)
    const p = root.shell.start(root.shell.resolve({ command: 'echo $$; sleep 30' }))
    const pid = Number((await readUntil(p, '\n')).trim())
    await root.fiber.dispose()
    return { status: p.status, signal: p.signal, alive: alive(pid) }
  },
})

// resolve().
add({
  name: 'resolve: defaults, and no key for an absent optional',
  exec: async ({ shell }) => shell.resolve({ command: 'true' }),
  expect: { command: 'true', workdir: BASE, timeoutMs: 120000, stdoutMaxBytes: 64000, sandboxPolicy: undefined },
})
add({
  name: 'resolve: every optional field carried through',
  exec: async ({ shell }) => {
    const ac = new AbortController()
    const spec = shell.resolve({ command: 'x', workdir: '/tmp', timeoutMs: 999999999, stdoutMaxBytes: 7, stdin: 'in', env: { A: '1' }, dshEnv: { DSH_B: '2' }, signal: ac.signal })
    return { ...spec, sameSignal: spec.signal === ac.signal }
  },
})

add({
  name: 'resolve: Buffer stdin and a policy without workspaceRoot',
  exec: async ({ shell }) => {
    const spec = shell.resolve({ command: 'x', workdir: '/tmp', stdin: Buffer.from('héllo'), sandboxPolicy: { mode: 'read-only' } })
    return { stdin: spec.stdin, sandboxPolicy: spec.sandboxPolicy }
  },
  differs: {
    id: 'resolved-spec',
    published: (r) => assert.deepEqual(r, { stdin: Buffer.from('héllo'), sandboxPolicy: { mode: 'read-only' } }),
    native: (r) => assert.deepEqual(r, { stdin: 'héllo', sandboxPolicy: { mode: 'read-only', workspaceRoot: '/tmp' } }),
  },
})

// Validation: both refuse, naming the same field (the wording differs).
const refusedRequests = [
  ['timeoutMs 0', { timeoutMs: 0 }],
  ['timeoutMs -1', { timeoutMs: -1 }],
  ['timeoutMs NaN', { timeoutMs: NaN }],
  ['timeoutMs Infinity', { timeoutMs: Infinity }],
  ['timeoutMs as a string', { timeoutMs: '100' }],
  ['stdoutMaxBytes 0', { stdoutMaxBytes: 0 }],
  ['stdoutMaxBytes -5', { stdoutMaxBytes: -5 }],
  ['stdoutMaxBytes NaN', { stdoutMaxBytes: NaN }],
]
for (const [label, fields] of refusedRequests) {
  add({ name: `validation: request ${label}`, request: { command: 'true', ...fields }, rejects: true })
}
// Refused by both, at different steps (native at resolve, the published
// spawn at run) with nothing in common to compare but the refusal.
add({ name: 'validation: a NUL byte in the command', request: { command: 'echo a\0b' }, rejects: 'any' })
const refusedConfigs = [
  ['graceMs 0', { graceMs: 0 }],
  ['graceMs above the timer limit', { graceMs: 2 ** 31 }],
  ['timeoutMs -1', { timeoutMs: -1 }],
  ['maxTimeoutMs NaN', { maxTimeoutMs: NaN }],
  ['maxOutputBytes Infinity', { maxOutputBytes: Infinity }],
  ['maxSpillBytes 0', { maxSpillBytes: 0 }],
]
for (const [label, config] of refusedConfigs) {
  add({ name: `validation: config ${label}`, exec: async ({ impl }) => compose(impl, { ...BASE_CONFIG, ...config }).then(() => 'loaded'), rejects: true })
}

// Validation the native executor is stricter about (docs/compat.md).
const stricter = (name, run, field) =>
  add({
    name: `validation: ${name}`,
    exec: async (h) => {
      try {
        return { accepted: await run(h) }
      } catch (e) {
        return rejection(e)
      }
    },
    differs: {
      id: field.startsWith('config.') ? 'config-validation' : 'strict-requests',
      published: (r) => assert.ok('accepted' in r, JSON.stringify(r)),
      native: (r) => assert.deepEqual(r, { rejected: true, field, code: null }),
    },
  })
const resolveOnly = (request) => async ({ shell }) => Object.keys(shell.resolve(request)).length > 0
stricter('an unknown request key', resolveOnly({ command: 'true', timeout_ms: 5 }), 'request.timeout_ms')
stricter('a fractional stdoutMaxBytes', resolveOnly({ command: 'true', stdoutMaxBytes: 2.5 }), 'request.stdoutMaxBytes')
stricter('an env value that is not a string', resolveOnly({ command: 'true', env: { A: 1 } }), 'request.env.A')
stricter('a dshEnv key outside DSH_', resolveOnly({ command: 'true', dshEnv: { SESSION: 'x' } }), 'request.dshEnv')
stricter('an empty workdir', resolveOnly({ command: 'true', workdir: '' }), 'request.workdir')
stricter('a command that is not a string', resolveOnly({ command: 5 }), 'request.command')
stricter('a fractional config graceMs', ({ impl }) => compose(impl, { ...BASE_CONFIG, graceMs: 100.5 }).then(() => true), 'config.graceMs')
stricter('config timeoutMs above maxTimeoutMs', ({ impl }) => compose(impl, { ...BASE_CONFIG, timeoutMs: 10000, maxTimeoutMs: 5000 }).then((root) => root.shell.resolve({ command: 'true' }).timeoutMs), 'config.timeoutMs')

// Sandbox policy on an executor with no default mode.
add({
  name: 'a sandboxPolicy on the spec',
  exec: async ({ shell, dir }) => {
    const r = await shell.run(shell.resolve({ command: 'echo x > written; echo rc=$?', workdir: dir, sandboxPolicy: { mode: 'read-only', workspaceRoot: dir } }))
    return { stdout: r.stdout.text, sandbox: r.sandbox, written: fs.existsSync(path.join(dir, 'written')) }
  },
  differs: {
    id: 'sandbox-policy',
    published: (r) => assert.deepEqual(r, { stdout: 'rc=0\n', sandbox: undefined, written: true }),
    native: (r) => {
      assert.equal(r.stdout, 'rc=1\n')
      assert.equal(r.written, false)
      assert.equal(r.sandbox.mode, 'read-only')
    },
  },
})

// The timeout hand-over: the seam's documents describe `onExpiry` (default
// 'kill'); the published executor drops the key and kills at the timeout.
add({
  name: "onExpiry 'background' at the timeout",
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: 'echo before; sleep 0.5; echo after', timeoutMs: 150, onExpiry: 'background' }))
    const seen = { exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut, stdout: r.stdout.text, handedOver: r.backgroundId !== undefined }
    if (r.backgroundId !== undefined) {
      const p = shell.get(r.backgroundId)
      await p.done
      Object.assign(seen, { rest: p.readOutput().delta, status: p.status })
    }
    return seen
  },
  differs: {
    id: 'on-expiry',
    published: (r) => assert.deepEqual(r, { exitCode: null, signal: 'SIGTERM', timedOut: true, stdout: 'before\n', handedOver: false }),
    native: (r) =>
      assert.deepEqual(r, { exitCode: null, signal: null, timedOut: true, stdout: 'before\n', handedOver: true, rest: 'after\n', status: 'completed' }),
  },
})
add({
  name: "onExpiry 'kill' is the default either way",
  exec: async ({ shell }) => {
    const r = await shell.run(shell.resolve({ command: 'echo before; sleep 30', timeoutMs: 150, onExpiry: 'kill' }))
    return { keys: Object.keys(shell.resolve({ command: 'true', onExpiry: 'kill' })).sort(), signal: r.signal, timedOut: r.timedOut, stdout: r.stdout.text }
  },
})

// ------------------------------------------------------------------ runner

/** One side of a case: its normalized outcome and the native extras seen. */
async function outcome(c, impl) {
  const dir = fs.mkdtempSync(path.join(BASE, `${impl}-`))
  const extras = new Set()
  let value
  const config = { ...BASE_CONFIG, ...c.config }
  try {
    if (c.exec) {
      // Cases that compose their own executor get no shared one.
      const shell = await shellFor(impl, config, c.hostEnv).catch(() => undefined)
      value = await c.exec({ impl, dir, shell })
    } else {
      const shell = await shellFor(impl, config, c.hostEnv)
      value = await shell.run(shell.resolve(c.request))
    }
  } catch (e) {
    value = c.rejects === 'any' ? { rejected: true } : rejection(e)
  }
  return { value: normalize(value, extras, impl), extras: [...extras].sort() }
}

/**
 * Values each executor makes its own, so the remote one's differ from the
 * local one's by nature: compared here with that value set aside.
 */
const REMOTE_OWN = {
  // Each executor tags its commands with a tag of its own.
  'exec-tag': (remote, native) => {
    assert.match(remote.DSH_EXEC_TAG, /^\S+$/)
    assert.notEqual(remote.DSH_EXEC_TAG, native.DSH_EXEC_TAG)
    const { DSH_EXEC_TAG: a, ...r } = remote
    const { DSH_EXEC_TAG: b, ...n } = native
    assert.deepEqual(r, n)
  },
}

for (const c of CASES) {
  test(`parity: ${c.name}`, async (t) => {
    const sides = REMOTE_MISSING ? ['published', 'native'] : ['published', 'native', 'remote']
    const run = () => Promise.all(sides.map((impl) => outcome(c, impl)))
    const [published, native, remote] = c.hostEnv ? await withHostEnv(c.hostEnv, run) : await run()
    await t.test('remote = native', (st) => {
      if (remote === undefined) return st.skip(REMOTE_MISSING)
      assert.deepEqual(remote.extras, native.extras, 'the extra fields the remote executor shows')
      const own = REMOTE_OWN[c.differs?.id]
      if (own) own(remote.value, native.value)
      else assert.deepEqual(remote.value, native.value)
    })
    assert.deepEqual(published.extras, [], 'the published shapes have no native extras')
    assert.deepEqual(native.extras, c.extras ?? [], 'the native extra fields this case shows')
    if (c.expect !== undefined) assert.deepEqual(published.value, c.expect, 'the published outcome, pinned')
    // Two rejections are equal whatever went wrong, so a case says whether
    // it expects one: a broken composition cannot pass as parity.
    const rejected = (v) => v !== null && typeof v === 'object' && v.rejected === true
    if (!c.differs) assert.equal(rejected(published.value), c.rejects !== undefined, JSON.stringify(published.value))
    if (c.differs && OVER_NATIVE && FROM_THE_PROVIDER.has(c.differs.id)) {
      assert.deepEqual(native.value, published.value, `over our provider, ${c.differs.id} is gone`)
    } else if (c.differs && OVER_NATIVE && c.differs.id in OVER_OUR_PROVIDER) {
      OVER_OUR_PROVIDER[c.differs.id](native.value, published.value)
    } else if (c.differs) {
      c.differs.published(published.value)
      c.differs.native(native.value, published.value)
      assert.notDeepEqual(native.value, published.value, `documented difference ${c.differs.id} still differs`)
    } else {
      assert.deepEqual(native.value, published.value)
    }
  })
}

// ------------------------------------------------------------ doc ⇄ table

test('docs/compat.md and this table name the same differences', () => {
  const whole = fs.readFileSync(new URL('../../docs/compat.md', import.meta.url), 'utf8')
  // The subprocess provider's part has a table of its own (subprocess-parity.test.mjs).
  const doc = whole.slice(0, whole.indexOf('\n## The subprocess provider'))
  const documented = new Set([...doc.matchAll(/^### `([a-z0-9-]+)`/gm)].map((m) => m[1]))
  const tested = new Set(CASES.filter((c) => c.differs).map((c) => c.differs.id))
  tested.add('extra-fields')
  assert.deepEqual([...documented].sort(), [...tested].sort())
  // The extra fields the doc lists are exactly the ones normalized away.
  const section = doc.slice(doc.indexOf('### `extra-fields`'))
  const body = section.slice(0, section.indexOf('\n### ', 1) === -1 ? undefined : section.indexOf('\n### ', 1))
  const listed = [...body.matchAll(/^- `(\w+)`/gm)].map((m) => m[1])
  assert.deepEqual(listed.sort(), [...NATIVE_EXTRAS].sort())
  assert.ok(CASES.length >= 50, `${CASES.length} cases`)
})

// ------------------------------------------------- a host with an extra fd

/**
 * The fds a command sees when its host holds an inheritable descriptor:
 * a Node host started with a pipe on fd 20 (what a parent process may pass)
 * composes the executor and lists the fds of a command's shell (`; true`
 * keeps bash from exec'ing ls in its place).
 */
function descriptorsSeenFromHost(impl) {
  const script = `
    const [{ Context }, { default: Subprocess }, { default: Executor }] = await Promise.all(process.argv.slice(1, 4).map((u) => import(u)))
    const root = new Context()
    await root.plugin(Subprocess)
    await root.plugin(Executor, JSON.parse(process.argv[4]))
    const r = await root.shell.run(root.shell.resolve({ command: 'ls /proc/$$/fd; true' }))
    process.stdout.write(r.stdout.text)
    await root.fiber.dispose()
  `
  const urls = [seamUrl('@deepseek-ai/cordis'), seamUrl('@deepseek-ai/dsh-subprocess-local'), EXECUTOR_URLS[impl], JSON.stringify(pluginConfig(impl, { graceMs: 300 }))]
  return new Promise((resolve, reject) => {
    // fd 20, past a gap: Node marks the contiguous low fds close-on-exec at
    // startup but leaves one past a gap inheritable, as it was passed.
    const stdio = ['ignore', 'pipe', 'inherit', ...Array(17).fill('ignore'), 'pipe']
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, ...urls], { stdio })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.on('error', reject)
    child.on('close', (code) => (code === 0 ? resolve(out.trim().split(/\s+/)) : reject(new Error(`host exited ${code}`))))
  })
}
