// How a harness plugin registers the native executor in place of its local
// JavaScript one. The plugin API here is the shape such harnesses use
// (a context with a replaceable `bash` service and a disposal hook); adapt
// the two marked lines to your harness.

import { NativeBashExecutor, type BashExecSpec, type BashRunResult } from 'dsh-native'

interface PluginContext {
  /** The capability seam: whatever implements it runs every bash call. */
  bash: unknown
  /** Called when the session or the harness shuts down. */
  onDispose(hook: () => Promise<void>): void
}

export function apply(ctx: PluginContext, options: { cwd?: string; timeoutMs?: number } = {}): NativeBashExecutor {
  const executor = new NativeBashExecutor({
    cwd: options.cwd,
    timeoutMs: options.timeoutMs ?? 120_000,
    graceMs: 3_000,
  })
  ctx.bash = executor // (1) replace the local executor
  ctx.onDispose(() => executor.dispose()) // (2) nothing it started outlives the session
  return executor
}

// A tool call, as the model-facing bash tool makes it.
export async function bashTool(executor: NativeBashExecutor, command: string, signal?: AbortSignal): Promise<string> {
  const spec: BashExecSpec = executor.resolve({ command, signal })
  const r: BashRunResult = await executor.run(spec)
  const status = r.signal ? `[killed by signal: ${r.signal}]` : `[exit code: ${r.exitCode}]`
  const more = r.stdout.spillPath ? `\n(full output: ${r.stdout.spillPath})` : ''
  return `${r.stdout.text}${r.stderr.text ? `\n[stderr]\n${r.stderr.text}` : ''}\n${status}${more}`
}
