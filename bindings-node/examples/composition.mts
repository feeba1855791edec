// A harness composition with dsh-native as `ctx.shell`: the published
// subprocess runtime, and the native plugin where `@deepseek-ai/dsh-bash-local`
// was. Type-checked by `npm run typecheck`; tests/node/harness.test.mjs
// runs the same composition.

import { Context } from '@deepseek-ai/cordis'
import LocalSubprocessRuntime from '@deepseek-ai/dsh-subprocess-local'
import type { ShellRunResult } from '@deepseek-ai/dsh-shell'
import NativeShellPlugin from 'dsh-native/harness'

export async function compose(cwd: string): Promise<Context> {
  const root = new Context()
  await root.plugin(LocalSubprocessRuntime)
  // The same config the published executor takes (see its README).
  await root.plugin(NativeShellPlugin, { cwd, timeoutMs: 120_000, maxOutputBytes: 64_000, graceMs: 3_000 })
  return root
}

/** A tool call, the way the model-facing bash tool makes one. */
export async function bashTool(root: Context, command: string, signal?: AbortSignal): Promise<string> {
  const spec = root.shell.resolve(signal === undefined ? { command } : { command, signal })
  const r: ShellRunResult = await root.shell.run(spec)
  const status = r.signal !== null ? `[killed by signal: ${r.signal}]` : `[exit code: ${r.exitCode}]`
  const more = r.stdout.spillPath !== undefined ? `\n(full output: ${r.stdout.spillPath})` : ''
  return `${r.stdout.text}${r.stderr.text ? `[stderr]\n${r.stderr.text}` : ''}${status}${more}`
}

/** Background work: start, read incrementally, stop. */
export async function background(root: Context): Promise<string> {
  const proc = root.shell.start(root.shell.resolve({ command: 'echo started; sleep 30' }))
  let seen = ''
  while (!seen.includes('started')) {
    seen += proc.readOutput().delta
    await new Promise((r) => setTimeout(r, 10))
  }
  proc.kill()
  await proc.done
  return `${seen}[${proc.status}]`
}
