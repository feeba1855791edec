// dsh-native/subprocess: the native executor as the harness's
// `ctx.subprocess` provider (docs/spawn.md). Load it where
// `@deepseek-ai/dsh-subprocess-local` was loaded.

import type { Context } from '@deepseek-ai/cordis'
import { SubprocessRuntime } from '@deepseek-ai/dsh-subprocess'
import type {
  SubprocessHandle,
  SubprocessSpawnSpec,
  SubprocessTerminalHandle,
  SubprocessTerminalSpawnSpec,
} from '@deepseek-ai/dsh-subprocess'

/**
 * `ctx.subprocess` on dsh-native: spawned programs with the seam's stdio
 * dispositions, whole-tree `waitForExit`/`terminate`, terminal sessions,
 * and disposal that ends every tree it started.
 */
export declare class NativeSubprocessRuntime extends SubprocessRuntime {
  /** Registers the service as `ctx.subprocess`; disposal ends every process it started. */
  constructor(ctx: Context)
  /** Absolute paths verified; bare names on the scrubbed PATH plus `env`; relative paths with a `/` rejected. */
  resolveExecutable(command: string, env?: Readonly<Record<string, string>>, signal?: AbortSignal): Promise<string>
  /** Starts a program; a program that cannot start gives a handle with pid −1 whose `done` rejects. */
  spawn(spec: SubprocessSpawnSpec): SubprocessHandle
  /** Starts a terminal session; `spec.signal` cancels the allocation only. */
  spawnTerminal(spec: SubprocessTerminalSpawnSpec): Promise<SubprocessTerminalHandle>
}

/** The plugin: `ctx.plugin(NativeSubprocessRuntime)`. */
export default NativeSubprocessRuntime

/** The seam's class the plugin extends, re-exported. */
export { SubprocessRuntime }
