'use strict'
// A Node host that rewrites process.env while commands start: no crash, and
// each command sees the environment as it was when it was asked for.
const test = require('node:test')
const assert = require('node:assert/strict')

const { executor } = require('./helpers.js')

test('process.env rewritten between starts: each command sees its own call', async () => {
  const ex = executor()
  const tasks = []
  for (let i = 0; i < 300; i++) {
    // Growing the environment makes libc reallocate it under any reader.
    process.env[`DSH_HOST_FILL_${i}`] = 'x'.repeat(64)
    process.env.HOST_MARKER = String(i)
    tasks.push([i, ex.start(ex.resolve({ command: 'echo $HOST_MARKER' }))])
    if (i % 50 === 0) delete process.env[`DSH_HOST_FILL_${i}`]
    if (i % 25 === 0) await ex.run(ex.resolve({ command: 'true' }))
  }
  for (const [i, task] of tasks) {
    await task.done
    assert.equal(task.readOutput().delta, `${i}\n`)
  }
  for (let i = 0; i < 300; i++) delete process.env[`DSH_HOST_FILL_${i}`]
  await ex.dispose()
})

test('a command runs in a session of its own, without a controlling terminal', async () => {
  const ex = executor()
  const r = await ex.run(ex.resolve({ command: 'read -r x < /dev/tty; echo rc=$?; ps -o sid= -p $$; echo $$' }))
  const [rc, sid, pid] = r.stdout.text.trim().split('\n').map((s) => s.trim())
  assert.equal(rc, 'rc=1')
  assert.equal(sid, pid, 'the command leads its own session')
  await ex.dispose()
})

// ---------------------------------------------------------------- host death

const fs = require('node:fs')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { alive, eventually, tmpdir } = require('./helpers.js')

const PLANT = path.join(__dirname, '..', 'shared', 'plant-escapes.sh')
const ROUTES = ['setsid', 'double', 'nohup', 'trapper', 'envorphan', 'envsetsid', 'forkloop', 'leader']
const PLACES = ['finished', 'background', 'foreground']

// The host: plants every escape (tests/shared/plant-escapes.sh) from a
// command that already exited, a background process and a foreground run in
// progress, says "ready", and on a line from the test ends as told: "exit"
// (process.exit, no dispose) or "crash" (an uncaught exception); "sigkill"
// waits for it.
const DEATH_HOST = `
const fs = require('node:fs')
const { NativeShellExecutor } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'bindings-node'))})
const [where, plant, ending] = process.argv.slice(1)
const routes = ${JSON.stringify(ROUTES)}
const command = (place, end) => \`mkdir -p \${where}/\${place} && . \${plant} \${where}/\${place}; \${end}\`
;(async () => {
  const ex = new NativeShellExecutor({ graceMs: 300 })
  await ex.run(ex.resolve({ command: command('finished', 'exit 0') }))
  ex.start(ex.resolve({ command: command('background', 'exec sleep 300') }))
  ex.run(ex.resolve({ command: command('foreground', 'exec sleep 300'), timeoutMs: 600000 }))
  const planted = () => ['finished', 'background', 'foreground'].every((p) =>
    routes.every((r) => { try { return fs.readFileSync(\`\${where}/\${p}/\${r}\`, 'utf8').trim() !== '' } catch { return false } }))
  const deadline = Date.now() + 60000
  while (!planted()) {
    if (Date.now() > deadline) throw new Error('not every escape was planted')
    await new Promise((r) => setTimeout(r, 10))
  }
  process.stdout.write('ready\\n')
  process.stdin.once('data', () => {
    if (ending === 'exit') process.exit(0)
    if (ending === 'crash') setImmediate(() => { throw new Error('the host crashed') })
  })
})()
`

function marked(mark) {
  const want = `HOST_DEATH_MARK=${mark}`
  const found = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      if (fs.readFileSync(`/proc/${name}/environ`, 'latin1').split('\0').includes(want) && alive(Number(name))) {
        found.push(Number(name))
      }
    } catch {}
  }
  return found
}

for (const ending of ['sigkill', 'exit', 'crash']) {
  test(`a host that dies (${ending}) without dispose leaves no process of its commands`, async () => {
    const dir = tmpdir()
    const mark = `node-${process.pid}-${ending}`
    const host = spawn(process.execPath, ['-e', DEATH_HOST, dir, PLANT, ending], {
      env: { ...process.env, HOST_DEATH_MARK: mark },
      // The crash's stack trace is expected; other hosts' stderr is kept.
      stdio: ['pipe', 'pipe', ending === 'crash' ? 'ignore' : 'inherit'],
    })
    const exited = new Promise((resolve) => host.once('exit', (code, signal) => resolve({ code, signal })))
    const pids = []
    try {
      const ready = await new Promise((resolve) => {
        let out = ''
        host.stdout.on('data', (d) => {
          out += d
          if (out.includes('\n')) resolve(out.trim())
        })
        host.once('exit', () => resolve(out.trim()))
      })
      assert.equal(ready, 'ready', 'the host failed before planting')
      for (const place of PLACES) {
        for (const route of ROUTES) {
          if (place === 'finished' && route === 'leader') continue // it exited
          pids.push(Number(fs.readFileSync(path.join(dir, place, route), 'utf8')))
        }
      }
      assert.ok(pids.every(alive), `${pids}`)
      let died
      if (ending === 'sigkill') {
        host.kill('SIGKILL')
        died = Date.now()
        await exited
      } else {
        host.stdin.write('go\n')
        const how = await exited
        died = Date.now()
        assert.equal(how.code, ending === 'exit' ? 0 : 1)
      }
      const left = () => [...pids.filter(alive), ...marked(mark)]
      await eventually(() => left().length === 0, 10000)
      const took = Date.now() - died
      assert.deepEqual(left(), [], `survived the host's death (${ending})`)
      assert.ok(took <= 1000, `the tree took ${took} ms to go`)
    } finally {
      host.kill('SIGKILL')
      for (let i = 0; i < 5; i++) {
        for (const pid of [...pids, ...marked(mark)]) {
          try {
            process.kill(pid, 'SIGKILL')
          } catch {}
        }
        if (marked(mark).length === 0) break
      }
    }
  })
}
