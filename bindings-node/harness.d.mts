// dsh-native/harness: the native executor as the harness's `ctx.shell`
// provider. Load it where `@deepseek-ai/dsh-bash-local` was loaded.
//
// The plugin is the seam's `ShellExecutor` and is declared with the seam's
// types, so the seam's names exported here are the seam's own (re-exported,
// not ours): `ShellProcess` here is what `ctx.shell.start` returns, where
// `dsh-native`'s `ShellProcess` is its wider `NativeShellProcess`.

import type { Context } from '@deepseek-ai/cordis'
import type z from '@deepseek-ai/schemastery'
import { ShellExecutor } from '@deepseek-ai/dsh-shell'
import type { ShellExecRequest, ShellExecSpec, ShellProcess, ShellRunResult } from '@deepseek-ai/dsh-shell'
import type { SandboxMode } from '@deepseek-ai/dsh-sandbox'
import type { RemoteTransport } from './remote.mjs'

/**
 * The plugin config: the published executor's fields (the `shell` settings
 * namespace), plus the native ones. Every field is optional; what is absent
 * takes the executor's default.
 */
export interface Config {
  /** Default working directory (default: the process cwd). */
  cwd?: string
  /** Default foreground timeout in milliseconds (default 120000). */
  timeoutMs?: number
  /** Upper bound for per-call timeouts (default 600000). */
  maxTimeoutMs?: number
  /** Per-stream in-memory cap; overflow spills to a file (default 64000). */
  maxOutputBytes?: number
  /** Per-stream spill-file cap (default 64 MiB). */
  maxSpillBytes?: number
  /** SIGTERM→SIGKILL grace and pipe-drain bound (default 3000, at most 2147483647). */
  graceMs?: number
  /** Settled background processes kept readable (default 1000). */
  retainSettled?: number
  /** Where the private 0700 spill directory is made (default: the temp dir). Fixed once made. */
  spillDir?: string
  /** Confine every command by default (Landlock); absent: commands are not confined. */
  sandboxMode?: SandboxMode
  /** Limits every command gets; a request may only tighten them (docs/limits.md). */
  limits?: {
    /** Memory of the whole tree, in bytes (a cgroup of its own). */
    memoryBytes?: number
    /** Processes and threads of the tree at once (a cgroup of its own). */
    processes?: number
    /** CPU seconds per process. */
    cpuSeconds?: number
    /** Largest file a process may write, in bytes. */
    fileSizeBytes?: number
    /** Descriptors a process may hold. */
    openFiles?: number
  }
  /**
   * Run commands on a `dsh serve` server instead of here: the executor is
   * then a `RemoteShellExecutor` (dsh-native/remote), connected while the
   * plugin starts (`await ctx.plugin(...)`). Not a shell setting: fixed for
   * the plugin's life; `spillDir` and a relative `cwd` are the server's.
   */
  transport?: RemoteTransport
}

/** The schema of {@link Config}'s shell settings, as the settings layer reads them (no defaults: the core applies them); `transport` is the plugin's, in `NativeShellPlugin.Config`. */
export declare const Config: z<Config>

/**
 * `ctx.shell` backed by dsh-native. Injects `subprocess` like the published
 * executor: its background processes belong to the composition that owns
 * `ctx.subprocess`, survive a reload of this plugin, and are stopped and
 * awaited when that composition tears down.
 */
export declare class NativeShellPlugin extends ShellExecutor {
  /** `['subprocess']`: background processes belong to the composition that owns `ctx.subprocess`. */
  static inject: string[]
  /** The config schema, for cordis: the shell settings and `transport`. */
  static Config: z<Config>
  /** Checks `config` (a bad field throws `INVALID_ARGUMENT`) and attaches the `shell` settings section; with a `transport`, the plugin's start connects. */
  constructor(ctx: Context, config?: Config)
  /** The configuration new commands get (the settings section, when one is attached). */
  get config(): Config
  /** The default sandbox mode; undefined when commands are not confined. */
  get sandboxMode(): SandboxMode | undefined
  /** Request → spec, with the current settings: the only place defaults are applied. */
  resolve(request: ShellExecRequest): ShellExecSpec
  /** Runs a spec in the foreground; never blocks the event loop; `spec.signal` aborts it. */
  run(spec: ShellExecSpec): Promise<ShellRunResult>
  /** Starts a spec in the background and returns its process at once; `spec.signal` kills it. */
  start(spec: ShellExecSpec): ShellProcess
  /**
   * The process registered under `id`, or undefined: how a run handed over
   * at its timeout (`onExpiry: 'background'`, the result's `backgroundId`)
   * is reached. Not part of the seam's `ShellExecutor`.
   */
  get(id: string): ShellProcess | undefined
}

/** The seam's abstract `ctx.shell` service, which {@link NativeShellPlugin} extends: the seam's own class. */
export { ShellExecutor }

/**
 * The seam's vocabulary, as the plugin's methods take and return it: the
 * seam's own types (`dsh-native` has the same names for its wider ones).
 */
export type {
  CollectedOutput,
  DshEnvironment,
  DshEnvironmentKey,
  ShellExecRequest,
  ShellExecSpec,
  ShellProcess,
  ShellProcessRead,
  ShellProcessStatus,
  ShellRunResult,
  ShellSandboxInfo,
} from '@deepseek-ai/dsh-shell'

/** The plugin, as the module's default export. */
export default NativeShellPlugin
