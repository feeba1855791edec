// Checks the package's declarations against its code (run by scripts/test,
// Node stage, after `npm run build`):
//
// 1. Every declaration of index.d.ts and harness.d.mts (types, interfaces
//    and their members, classes and their members, functions, constants)
//    carries a JSDoc comment.
// 2. What index.js and harness.mjs export at run time is exactly what
//    index.d.ts and harness.d.mts declare as values.
// 3. Everything index.js takes from the native addon — the names it
//    requires from loader.js (which loads the addon) and every member it
//    uses on a native executor, process or cancel token — exists in the
//    loaded addon and is declared in native.d.ts, which `npm run build`
//    generates from the Rust source.
//
// Usage: node check-declarations.mjs (from bindings-node/).

import { readFileSync } from 'node:fs'
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

// Which native class a receiver holds, in each class of index.js.
const RECEIVERS = {
  NativeShellProcess: { 'this.#native': 'NativeProcess', native: 'NativeProcess' },
  NativeShellExecutor: { 'this.#native': 'NativeExecutor', native: 'NativeProcess', token: 'NativeCancelToken' },
}

function nativeUses() {
  const source = parse('index.js')
  const imports = []
  const members = []
  const visit = (node, cls) => {
    if (
      ts.isVariableDeclaration(node) &&
      node.initializer?.getText() === `require('${LOADER}')` &&
      ts.isObjectBindingPattern(node.name)
    ) {
      node.name.elements.forEach((e) => imports.push((e.propertyName ?? e.name).getText()))
    }
    if (ts.isClassDeclaration(node)) cls = node.name.getText()
    if (cls && ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.name)) {
      const target = RECEIVERS[cls]?.[node.expression.getText()]
      if (target) members.push({ target, name: node.name.getText(), at: `index.js:${line(node)}` })
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

function checkNative() {
  const native = require(LOADER)
  const declared = declaredNative()
  const { imports, members } = nativeUses()
  if (imports.length === 0) problem(`index.js: no \`const { … } = require('${LOADER}')\` found`)
  for (const name of imports) {
    if (!(name in native)) problem(`index.js requires ${name} from ${LOADER}, which the addon does not export`)
    if (!declared.exports.has(name)) problem(`index.js requires ${name} from ${LOADER}, which native.d.ts does not declare`)
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

const jsdoc = checkJsDoc('index.d.ts') + checkJsDoc('harness.d.mts')
compareExports('index.js', Object.keys(require('./index.js')), 'index.d.ts')
compareExports('harness.mjs', Object.keys(await import('./harness.mjs')), 'harness.d.mts')
const uses = checkNative()

for (const p of problems) console.error(`check-declarations: ${p}`)
console.log(
  `check-declarations: checked JSDoc on ${jsdoc} declarations, the exports of index.js and harness.mjs, ` +
    `and ${uses.imports} names and ${uses.members} members index.js takes from the addon: ` +
    (problems.length ? `${problems.length} problems` : 'ok'),
)
process.exit(problems.length ? 1 : 0)
