'use strict'
// The addon loader (bindings-node/loader.js): without a binary for this
// machine, requiring dsh-native throws one Error that names the machine, the
// supported platforms and how to build from source; never a bare
// "Cannot find module".

const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const pkgDir = path.join(__dirname, '..', '..', 'bindings-node')

/** Requires dsh-native from `dir` in a fresh node, `preload` run first; returns the thrown error's fields. */
function requireIn(dir, preload = '') {
  const script = `${preload}
try {
  require(${JSON.stringify(dir)})
  console.log(JSON.stringify({ loaded: true }))
} catch (err) {
  console.log(JSON.stringify({ message: err.message, code: err.code, platform: err.platform, arch: err.arch, libc: err.libc }))
}`
  const out = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' })
  assert.equal(out.status, 0, out.stderr)
  return JSON.parse(out.stdout)
}

/** A copy of the package's JavaScript without any .node file. */
function copyWithoutBinary(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-loader-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const file of ['index.js', 'loader.js', 'write-queue.js', 'package.json']) {
    fs.copyFileSync(path.join(pkgDir, file), path.join(dir, file))
  }
  return dir
}

const BUILD = 'cd bindings-node && npm ci && npm run build'

test('no source build and no platform package: one error naming the machine and the way to build', (t) => {
  const got = requireIn(copyWithoutBinary(t))
  assert.equal(got.code, 'DSH_NATIVE_BINARY')
  assert.match(got.message, new RegExp(`platform=${process.platform} arch=${process.arch}`))
  assert.match(got.message, /dsh-native-linux-x64-gnu/)
  assert.ok(got.message.includes(BUILD), got.message)
  assert.doesNotMatch(got.message, /Cannot find module/)
})

test('an unsupported platform is named, with the supported one and the way to build', (t) => {
  const got = requireIn(
    copyWithoutBinary(t),
    "Object.defineProperty(process, 'arch', { value: 'riscv64' })",
  )
  assert.equal(got.code, 'DSH_NATIVE_BINARY')
  assert.equal(got.arch, 'riscv64')
  assert.match(got.message, /no prebuilt binary for this machine \(platform=\w+ arch=riscv64 libc=\w+\)/)
  assert.match(got.message, /linux-x64-gnu \(x86_64 Linux, glibc 2\.17 or newer\)/)
  assert.ok(got.message.includes(BUILD), got.message)
})

test('a source build that does not load is reported with its cause, not skipped', (t) => {
  const dir = copyWithoutBinary(t)
  fs.writeFileSync(path.join(dir, 'dsh-native.linux-x64-gnu.node'), 'not an ELF file')
  if (process.platform !== 'linux' || process.arch !== 'x64') return t.skip('linux-x64 only')
  const got = requireIn(dir)
  assert.equal(got.code, 'DSH_NATIVE_BINARY')
  assert.match(got.message, /source-built addon .* did not load/)
  assert.ok(got.message.includes(BUILD), got.message)
})
