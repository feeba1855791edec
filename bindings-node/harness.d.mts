// dsh-native/harness: the native executor as the harness's `ctx.shell`
// provider. Load it where `@deepseek-ai/dsh-bash-local` was loaded.

import type { Context } from '@deepseek-ai/cordis'
import type z from '@deepseek-ai/schemastery'
import { ShellExecutor } from '@deepseek-ai/dsh-shell'
import type { ShellExecRequest, ShellExecSpec, ShellProcess, ShellRunResult } from '@deepseek-ai/dsh-shell'
import type { SandboxMode } from '@deepseek-ai/dsh-sandbox'

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
}

export declare const Config: z<Config>

/**
 * `ctx.shell` backed by dsh-native. Injects `subprocess` like the published
 * executor: its background processes belong to the composition that owns
 * `ctx.subprocess`, survive a reload of this plugin, and are stopped and
 * awaited when that composition tears down.
 */
export declare class NativeShellPlugin extends ShellExecutor {
  static inject: string[]
  static Config: z<Config>
  constructor(ctx: Context, config?: Config)
  /** The configuration new commands get (the settings section, when one is attached). */
  get config(): Config
  get sandboxMode(): SandboxMode | undefined
  resolve(request: ShellExecRequest): ShellExecSpec
  run(spec: ShellExecSpec): Promise<ShellRunResult>
  start(spec: ShellExecSpec): ShellProcess
}

export default NativeShellPlugin
