// dsh-native/harness: the native executor as a DeepSeek Harness plugin.
// It extends the published abstract `ShellExecutor` and registers as
// `ctx.shell`, in place of `@deepseek-ai/dsh-bash-local`. It only adapts:
// settings in, the seam's shapes out; every rule lives in the Rust core.

import { createRequire } from 'node:module'
import { SHELL_SETTINGS_NAMESPACE, ShellExecutor } from '@deepseek-ai/dsh-shell'
import { installSettingsSection } from '@deepseek-ai/dsh-settings'
import { symbols } from '@deepseek-ai/cordis'
import z from '@deepseek-ai/schemastery'

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
 * `ctx.shell` backed by dsh-native. Reads the shell settings section the
 * published executor reads, and applies run-time changes to the next
 * command, as it does.
 */
// Symbol-keyed, not `#private`: cordis hands out proxies of a service, and
// private fields do not survive a proxy.
const EXECUTOR = Symbol('dsh-native executor')
const SOURCE = Symbol('dsh-native config source')

export class NativeShellPlugin extends ShellExecutor {
  static inject = ['subprocess']
  static Config = Config

  constructor(ctx, config) {
    super(ctx)
    const entry = nativeConfig(config)
    this[SOURCE] = () => entry
    // Making (or reconfiguring) the executor validates the entry: a bad
    // field throws INVALID_ARGUMENT here, before anything is registered.
    this[EXECUTOR] = executorFor(ctx, entry)
    installSettingsSection(ctx, SHELL_SETTINGS_NAMESPACE, Config, config ?? {}, {
      validate: (value) => checkConfig(nativeConfig(value)),
      setSource: (current) => {
        this[SOURCE] = current
      },
      onChange: () => {
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

  /** The configuration this executor runs with (what the settings say now). */
  get config() {
    return nativeConfig(this[SOURCE]())
  }

  /** The default sandbox mode; undefined when commands are not confined. */
  get sandboxMode() {
    return this[EXECUTOR].sandboxMode
  }

  resolve(request) {
    return this[EXECUTOR].resolve(request)
  }

  run(spec) {
    return this[EXECUTOR].run(spec)
  }

  start(spec) {
    return this[EXECUTOR].start(spec)
  }

  /**
   * The process registered under `id`, or undefined: how a run handed over
   * at its timeout (`onExpiry: 'background'`, the result's `backgroundId`)
   * is reached. Not part of the seam's `ShellExecutor`.
   */
  get(id) {
    return this[EXECUTOR].get(id)
  }
}

export default NativeShellPlugin
export { Config }
// The seam's class the plugin extends, under its own name (harness.d.mts).
export { ShellExecutor }
