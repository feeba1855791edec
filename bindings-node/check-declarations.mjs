// Checks the package's declarations against its code (run by scripts/test,
// Node stage, after `npm run build`):
//
// 1. Every declaration of index.d.ts, harness.d.mts, subprocess.d.mts and
//    remote.d.mts (types, interfaces and their members, classes and their
//    members, functions, constants) carries a JSDoc comment.
// 2. What index.js, harness.mjs, subprocess.mjs and remote.mjs export at run
//    time is exactly what their .d.ts / .d.mts declare as values.
// 3. Everything index.js, subprocess.mjs and the parts of remote.mjs (remote/)
//    take from the native addon —
//    the names they require from loader.js (which loads the addon) and every
//    member used on a native executor, process, spawned program or cancel
//    token — exists in the
//    loaded addon and is declared in native.d.ts, which `npm run build`
//    generates from the Rust source.
// 4. Every name the installed seam (@deepseek-ai/dsh-shell) exports is
//    exported by index.d.ts and by harness.d.mts too, unless listed in
//    NOT_MIRRORED with its reason; the values mirrored from the seam are
//    the seam's at run time. (tests/node/seam-types.mts checks the types.)
//
// Usage: node check-declarations.mjs (from bindings-node/).

import { readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import ts from 'typescript'

const require = createRequire(import.meta.url)
const problems = []
const problem = (text) => problems.push(text)

function parse(file) {
  const kind = file.endsWith('.js') ? ts.ScriptKind.JS : ts.ScriptKind.TS
  const text = readFileSync(new URL(file, import.meta.url), 'utf8')
  return ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind)
}

const line = (node) => node.getSourceFile().getLineAndCharacterOfPosition(node.getStart()).line + 1
const hasJsDoc = (node) => ts.getJSDocCommentsAndTags(node).some((d) => ts.isJSDoc(d))
const isExported = (node) => ts.getCombinedModifierFlags(node) & ts.ModifierFlags.Export

// 1. JSDoc on every declaration -------------------------------------------------

const MEMBER_KINDS = new Set([
  ts.SyntaxKind.PropertySignature,
  ts.SyntaxKind.MethodSignature,
  ts.SyntaxKind.PropertyDeclaration,
  ts.SyntaxKind.MethodDeclaration,
  ts.SyntaxKind.GetAccessor,
  ts.SyntaxKind.SetAccessor,
  ts.SyntaxKind.Constructor,
  ts.SyntaxKind.CallSignature,
  ts.SyntaxKind.IndexSignature,
])

function checkJsDoc(file) {
  const source = parse(file)
  let checked = 0
  const need = (node, what) => {
    checked += 1
    if (!hasJsDoc(node)) problem(`${file}:${line(node)}: ${what} has no JSDoc comment`)
  }
  for (const st of source.statements) {
    if (ts.isImportDeclaration(st)) continue
    if (ts.isExportAssignment(st)) need(st, 'the default export')
    else if (ts.isExportDeclaration(st)) need(st, `the export of ${st.exportClause?.getText() ?? '*'}`)
    else if (ts.isVariableStatement(st)) need(st, st.declarationList.declarations.map((d) => d.name.getText()).join(', '))
    else if (st.name) need(st, st.name.getText())
    else problem(`${file}:${line(st)}: an unexpected statement`)
    if (ts.isInterfaceDeclaration(st) || ts.isClassDeclaration(st)) {
      for (const m of st.members) {
        if (MEMBER_KINDS.has(m.kind)) need(m, `${st.name.getText()}.${m.name ? m.name.getText() : 'constructor'}`)
      }
    }
  }
  return checked
}

// 2. Run-time exports against declared values ----------------------------------

function declaredValues(file) {
  const names = new Set()
  for (const st of parse(file).statements) {
    if (ts.isExportAssignment(st)) names.add('default')
    // `export { A }` exports a value (harness.d.mts re-exports the seam's class); `export type { … }` does not.
    if (ts.isExportDeclaration(st) && !st.isTypeOnly && st.exportClause && ts.isNamedExports(st.exportClause)) {
      st.exportClause.elements.filter((e) => !e.isTypeOnly).forEach((e) => names.add(e.name.getText()))
    }
    if (!isExported(st)) continue
    if (ts.isClassDeclaration(st) || ts.isFunctionDeclaration(st)) names.add(st.name.getText())
    if (ts.isVariableStatement(st)) st.declarationList.declarations.forEach((d) => names.add(d.name.getText()))
  }
  return names
}

function compareExports(jsFile, runtime, dtsFile) {
  const declared = declaredValues(dtsFile)
  for (const name of runtime) if (!declared.has(name)) problem(`${jsFile} exports ${name}, which ${dtsFile} does not declare`)
  for (const name of declared) if (!runtime.includes(name)) problem(`${dtsFile} declares ${name}, which ${jsFile} does not export`)
}

// 3. index.js against the addon and native.d.ts --------------------------------

// The module through which index.js loads the addon.
const LOADER = './loader.js'
// How `file` names it: a file in a folder (remote/) names it from there.
const loaderFrom = (file) => (file.includes('/') ? `.${LOADER}` : LOADER)

// Which native class a receiver holds, in each class (or top-level
// function) of index.js and subprocess.mjs.
const RECEIVERS = {
  pipeReadable: { native: 'NativeSpawned', reader: 'NativePipeReader' },
  NativeShellProcess: { 'this.#native': 'NativeProcess', native: 'NativeProcess' },
  NativeShellExecutor: { 'this.#native': 'NativeExecutor', native: 'NativeProcess', token: 'NativeCancelToken' },
  NativeSubprocessHandle: { 'this.#native': 'NativeSpawned', native: 'NativeSpawned' },
  NativeSubprocessRuntime: { 'this[NATIVE]': 'NativeExecutor', native: 'NativeSpawned', token: 'NativeCancelToken' },
}

function nativeUses(file) {
  const source = parse(file)
  const imports = []
  const members = []
  const visit = (node, cls) => {
    if (
      ts.isVariableDeclaration(node) &&
      (node.initializer?.getText() ?? '').startsWith('require(') &&
      node.initializer.getText().includes(`'${loaderFrom(file)}'`) &&
      ts.isObjectBindingPattern(node.name)
    ) {
      node.name.elements.forEach((e) => imports.push((e.propertyName ?? e.name).getText()))
    }
    if (ts.isClassDeclaration(node) || (ts.isFunctionDeclaration(node) && node.name && ts.isSourceFile(node.parent))) cls = node.name.getText()
    if (cls && ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.name)) {
      const target = RECEIVERS[cls]?.[node.expression.getText()]
      if (target) members.push({ target, name: node.name.getText(), at: `${file}:${line(node)}` })
    }
    ts.forEachChild(node, (child) => visit(child, cls))
  }
  visit(source, undefined)
  return { imports, members }
}

function declaredNative() {
  const exports = new Set()
  const classes = new Map()
  for (const st of parse('native.d.ts').statements) {
    if (ts.isClassDeclaration(st) || ts.isFunctionDeclaration(st)) exports.add(st.name.getText())
    if (ts.isVariableStatement(st)) st.declarationList.declarations.forEach((d) => exports.add(d.name.getText()))
    if (ts.isClassDeclaration(st)) {
      classes.set(st.name.getText(), new Set(st.members.filter((m) => m.name).map((m) => m.name.getText())))
    }
  }
  return { exports, classes }
}

function checkNative(file) {
  const native = require(LOADER)
  const declared = declaredNative()
  const { imports, members } = nativeUses(file)
  if (imports.length === 0) problem(`${file}: no \`const { … } = require('${loaderFrom(file)}')\` found`)
  for (const name of imports) {
    if (!(name in native)) problem(`${file} requires ${name} from ${loaderFrom(file)}, which the addon does not export`)
    if (!declared.exports.has(name)) problem(`${file} requires ${name} from ${loaderFrom(file)}, which native.d.ts does not declare`)
  }
  const seen = new Set()
  for (const { target, name, at } of members) {
    const key = `${target}.${name}`
    if (seen.has(key)) continue
    seen.add(key)
    if (!(name in (native[target]?.prototype ?? {}))) problem(`${at}: ${key} is used, but the addon's ${target} has no ${name}`)
    if (!declared.classes.get(target)?.has(name)) problem(`${at}: ${key} is used, but native.d.ts does not declare it`)
  }
  return { imports: imports.length, members: seen.size }
}

// 4. The seam's names ------------------------------------------------------------

const SEAM = '@deepseek-ai/dsh-shell'

// Seam names an entry point does not export, each with its reason. A name
// listed here that the entry point exports, or that the seam no longer
// exports, is a problem too, so the list stays true.
const TOOLS = "the shell tools' helper for their rendered result text, not the executor's"
const SETTINGS = "the seam's settings namespace, for the harness's settings layer; the plugin registers it"
const NOT_MIRRORED = {
  'index.d.ts': {
    parseExitStatus: TOOLS,
    ParsedExitStatus: TOOLS,
    SHELL_SETTINGS_NAMESPACE: SETTINGS,
  },
  'harness.d.mts': {
    parseExitStatus: TOOLS,
    ParsedExitStatus: TOOLS,
    SHELL_SETTINGS_NAMESPACE: SETTINGS,
    DSH_ENV_PREFIX: "a constant, not the plugin's vocabulary; `dsh-native` and the seam export it",
  },
}

// Values the entry points take over from the seam: the seam's at run time.
const MIRRORED_VALUES = { 'index.js': ['DSH_ENV_PREFIX'], 'harness.mjs': ['ShellExecutor'] }

function moduleExports() {
  const config = ts.getParsedCommandLineOfConfigFile('tsconfig.json', {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })
  const seamFile = config.options.paths?.[SEAM]?.[0]
  if (config.errors.length || !seamFile) {
    problem(`tsconfig.json: cannot find the seam's declarations (paths["${SEAM}"])`)
    return undefined
  }
  const files = { seam: ts.sys.resolvePath(seamFile), 'index.d.ts': ts.sys.resolvePath('index.d.ts'), 'harness.d.mts': ts.sys.resolvePath('harness.d.mts') }
  const program = ts.createProgram(Object.values(files), config.options)
  const checker = program.getTypeChecker()
  const names = {}
  for (const [key, file] of Object.entries(files)) {
    const source = program.getSourceFile(file)
    const symbol = source && checker.getSymbolAtLocation(source)
    if (!symbol) {
      problem(`${key}: not a module the checker can read (${file})`)
      return undefined
    }
    names[key] = new Set(checker.getExportsOfModule(symbol).map((s) => s.getName()))
  }
  return names
}

async function checkSeamNames() {
  const names = moduleExports()
  if (!names) return 0
  const seamNames = [...names.seam].filter((n) => n !== 'default')
  for (const file of ['index.d.ts', 'harness.d.mts']) {
    const skip = NOT_MIRRORED[file]
    for (const name of seamNames) {
      if (!names[file].has(name) && !(name in skip)) problem(`${file} does not export ${name}, which ${SEAM} exports`)
    }
    for (const name of Object.keys(skip)) {
      if (names[file].has(name)) problem(`${file} exports ${name}, listed in NOT_MIRRORED as not exported`)
      if (!names.seam.has(name)) problem(`NOT_MIRRORED lists ${name}, which ${SEAM} no longer exports`)
    }
  }
  const seam = await import(SEAM)
  const modules = { 'index.js': require('./index.js'), 'harness.mjs': await import('./harness.mjs') }
  for (const [file, values] of Object.entries(MIRRORED_VALUES)) {
    for (const name of values) {
      if (modules[file][name] !== seam[name]) problem(`${file}'s ${name} is not ${SEAM}'s`)
    }
  }
  return seamNames.length
}

const jsdoc = checkJsDoc('index.d.ts') + checkJsDoc('harness.d.mts') + checkJsDoc('subprocess.d.mts') + checkJsDoc('remote.d.mts')
compareExports('index.js', Object.keys(require('./index.js')), 'index.d.ts')
compareExports('harness.mjs', Object.keys(await import('./harness.mjs')), 'harness.d.mts')
compareExports('subprocess.mjs', Object.keys(await import('./subprocess.mjs')), 'subprocess.d.mts')
compareExports('remote.mjs', Object.keys(await import('./remote.mjs')), 'remote.d.mts')
// remote.mjs's parts that load the addon (today remote/session.mjs alone).
const remoteParts = readdirSync(new URL('./remote/', import.meta.url))
  .map((f) => `remote/${f}`)
  .filter((f) => readFileSync(new URL(f, import.meta.url), 'utf8').includes(`require('${loaderFrom(f)}')`))
const nativeUsers = ['index.js', 'subprocess.mjs', ...remoteParts].map(checkNative)
const uses = { imports: nativeUsers.reduce((n, u) => n + u.imports, 0), members: nativeUsers.reduce((n, u) => n + u.members, 0) }
const seamNames = await checkSeamNames()

for (const p of problems) console.error(`check-declarations: ${p}`)
console.log(
  `check-declarations: checked JSDoc on ${jsdoc} declarations, the exports of index.js, harness.mjs, subprocess.mjs and remote.mjs, ` +
    `${uses.imports} names and ${uses.members} members index.js, subprocess.mjs and ${remoteParts.join(', ')} take from the addon, ` +
    `and ${seamNames} names of ${SEAM} in both entry points: ` +
    (problems.length ? `${problems.length} problems` : 'ok'),
)
process.exit(problems.length ? 1 : 0)
