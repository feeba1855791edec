// dsh-native/harness: the native executor as a DeepSeek Harness plugin.
// It extends the published abstract `ShellExecutor` and registers as
// `ctx.shell`, in place of `@deepseek-ai/dsh-bash-local`. It only adapts:
// settings in, the seam's shapes out; every rule lives in the Rust core.
// With a `transport` in its config the executor is a RemoteShellExecutor
// (dsh-native/remote): the same API over `dsh serve`, connected while the
// plugin starts.

import { createRequire } from 'node:module'
import { SHELL_SETTINGS_NAMESPACE, ShellExecutor } from '@deepseek-ai/dsh-shell'
import { installSettingsSection } from '@deepseek-ai/dsh-settings'
import { symbols } from '@deepseek-ai/cordis'
import z from '@deepseek-ai/schemastery'
import { RemoteShellExecutor } from './remote.mjs'

const require = createRequire(import.meta.url)
const native = require('./index.js')
const { NativeShellExecutor, checkConfig } = native

/**
 * The settings the published executor reads (the shell namespace), plus the
 * native ones. No defaults here: what a section omits, the core defaults,
 * so the values live in one place.
 */
const Config = z.object({
  cwd: z.string().description('Default working directory (default: the process cwd).'),
  timeoutMs: z.number().description('Default foreground timeout in milliseconds (default 120000).'),
  maxTimeoutMs: z.number().description('Upper bound for per-call timeouts (default 600000).'),
  maxOutputBytes: z.number().description('Per-stream in-memory cap; overflow spills to a file (default 64000).'),
  maxSpillBytes: z.number().description('Per-stream spill-file cap (default 64 MiB).'),
  graceMs: z.number().description('SIGTERM→SIGKILL grace and pipe-drain bound (default 3000).'),
  retainSettled: z.number().description('Settled background processes kept readable (default 1000).'),
  spillDir: z.string().description('Where the private spill directory is made (default: the temp dir; fixed once made).'),
  sandboxMode: z
    .union(['read-only', 'workspace-write', 'danger-full-access'])
    .description('Confine every command by default (Landlock); absent: commands are not confined.'),
  limits: z
    .object({
      memoryBytes: z.number().description('Memory of the whole tree, in bytes (a cgroup of its own).'),
      processes: z.number().description('Processes and threads of the tree at once (a cgroup of its own).'),
      cpuSeconds: z.number().description('CPU seconds per process.'),
      fileSizeBytes: z.number().description('Largest file a process may write, in bytes.'),
      openFiles: z.number().description('Descriptors a process may hold.'),
    })
    .description('Limits every command gets; a request may only tighten them (docs/limits.md).'),
})

/**
 * Where a remote executor's server is (dsh-native/remote): a program
 * speaking the protocol on its stdin and stdout, or a unix socket. Not a
 * shell setting: it is fixed for the plugin's life.
 */
const Transport = z.union([
  z.object({ command: z.array(z.string()).required().description('The program and its arguments, e.g. ssh host dsh serve --stdio.') }),
  z.object({ socket: z.string().required().description('The path of a unix socket `dsh serve --listen unix:PATH` listens on.') }),
])

/** The plugin's config: the settings, and where the executor runs. */
const PluginConfig = z.intersect([
  Config,
  z.object({ transport: Transport.description('Run commands on a `dsh serve` server instead of here (dsh-native/remote).') }),
])

/** The config fields the core knows, without keys whose value is absent. */
function nativeConfig(section) {
  const out = {}
  for (const key of Object.keys(Config.dict)) {
    if (section?.[key] !== undefined) out[key] = section[key]
  }
  return out
}

/**
 * One native executor per composition: keyed by the subprocess service's
 * own context, torn down (processes killed and awaited) when that service
 * is disposed, so a background process survives an executor-only reload
 * exactly as it does with the published executor.
 */
const executors = new WeakMap()

function executorFor(ctx, config) {
  // A service seen through `ctx` is a proxy that reports the reader's own
  // context; the original carries the context that provides it.
  const anchor = ctx.subprocess[symbols.original].ctx
  let entry = executors.get(anchor)
  if (entry === undefined) {
    entry = { executor: new NativeShellExecutor(config) }
    executors.set(anchor, entry)
    anchor.effect(
      () => () => {
        executors.delete(anchor)
        return entry.executor.dispose()
      },
      'dsh-native shell processes',
    )
  } else {
    entry.executor.reconfigure(config)
  }
  return entry.executor
}

/**
 * A remote executor per composition and transport, kept like the local one
 * (a background process survives an executor-only reload) and disposed
 * when the composition tears down. A connection that was lost is replaced
 * by the next load.
 */
const remotes = new WeakMap()

async function remoteExecutorFor(ctx, transport, config) {
  const anchor = ctx.subprocess[symbols.original].ctx
  let byTransport = remotes.get(anchor)
  if (byTransport === undefined) {
    byTransport = new Map()
    remotes.set(anchor, byTransport)
    anchor.effect(
      () => () => {
        remotes.delete(anchor)
        return Promise.all([...byTransport.values()].map((made) => made.then((ex) => ex.dispose(), () => {})))
      },
      'dsh-native remote shell processes',
    )
  }
  const key = JSON.stringify(transport)
  const made = byTransport.get(key)
  if (made !== undefined) {
    const ex = await made.catch(() => undefined)
    if (ex !== undefined) {
      try {
        ex.reconfigure(config)
        return ex
      } catch (err) {
        if (err.code !== 'CONNECTION_LOST') throw err
        // Its processes settled when it was lost; a new connection replaces it.
        byTransport.delete(key)
        await ex.dispose()
      }
    }
  }
  const connecting = RemoteShellExecutor.connect({ transport, config })
  byTransport.set(key, connecting)
  connecting.catch(() => {
    if (byTransport.get(key) === connecting) byTransport.delete(key)
  })
  return connecting
}

/** A config without its spillDir: on a remote executor that is the server's directory, checked there. */
function withoutSpillDir(config) {
  const { spillDir: _, ...rest } = config
  return rest
}

/** The plugin's executor; a remote one exists once the plugin has started. */
function executorOf(plugin) {
  const ex = plugin[EXECUTOR]
  if (ex === undefined) {
    const err = new Error(
      "dsh-native/harness: the remote executor is not connected yet: the plugin's start (connecting to its transport) has not finished; await ctx.plugin(...) first",
    )
    err.code = 'NOT_CONNECTED'
    throw err
  }
  return ex
}

/**
 * `ctx.shell` backed by dsh-native. Reads the shell settings section the
 * published executor reads, and applies run-time changes to the next
 * command, as it does.
 */
// Symbol-keyed, not `#private`: cordis hands out proxies of a service, and
// private fields do not survive a proxy.
const EXECUTOR = Symbol('dsh-native executor')
const SOURCE = Symbol('dsh-native config source')
const TRANSPORT = Symbol('dsh-native transport')

export class NativeShellPlugin extends ShellExecutor {
  static inject = ['subprocess']
  static Config = PluginConfig

  constructor(ctx, config) {
    super(ctx)
    const entry = nativeConfig(config)
    this[SOURCE] = () => entry
    const transport = config?.transport
    this[TRANSPORT] = transport
    // A remote server's spillDir is its own: checking it here would make a
    // directory on this machine.
    const check = transport === undefined ? checkConfig : (value) => checkConfig(withoutSpillDir(value))
    if (transport === undefined) {
      // Making (or reconfiguring) the executor validates the entry: a bad
      // field throws INVALID_ARGUMENT here, before anything is registered.
      this[EXECUTOR] = executorFor(ctx, entry)
    } else {
      // Checked now, as the local executor's is; the executor itself is
      // connected in the plugin's start ([symbols.init]).
      check(entry)
    }
    const { transport: _, ...section } = config ?? {}
    installSettingsSection(ctx, SHELL_SETTINGS_NAMESPACE, Config, section, {
      validate: (value) => check(nativeConfig(value)),
      setSource: (current) => {
        this[SOURCE] = current
      },
      onChange: () => {
        // A remote executor not connected yet takes the settings as they
        // are when it connects.
        if (this[EXECUTOR] === undefined) return
        try {
          this[EXECUTOR].reconfigure(nativeConfig(this[SOURCE]()))
        } catch (err) {
          // The settings layer validated the section; only a field that
          // cannot change at run time (spillDir) lands here.
          ctx.logger?.('shell')?.warn?.(err)
        }
      },
    })
  }

  /** Connects a remote executor (the plugin's start: cordis awaits it before `ctx.shell` is ready). */
  async [symbols.init]() {
    const transport = this[TRANSPORT]
    if (transport === undefined) return
    this[EXECUTOR] = await remoteExecutorFor(this.ctx, transport, nativeConfig(this[SOURCE]()))
  }

  /** The configuration this executor runs with (what the settings say now). */
  get config() {
    return nativeConfig(this[SOURCE]())
  }

  /** The default sandbox mode; undefined when commands are not confined. */
  get sandboxMode() {
    return this[EXECUTOR]?.sandboxMode
  }

  resolve(request) {
    return executorOf(this).resolve(request)
  }

  async run(spec) {
    return executorOf(this).run(spec)
  }

  start(spec) {
    return executorOf(this).start(spec)
  }

  /**
   * The process registered under `id`, or undefined: how a run handed over
   * at its timeout (`onExpiry: 'background'`, the result's `backgroundId`)
   * is reached. Not part of the seam's `ShellExecutor`.
   */
  get(id) {
    return executorOf(this).get(id)
  }
}

export default NativeShellPlugin
export { Config }
// The seam's class the plugin extends, under its own name (harness.d.mts).
export { ShellExecutor }
