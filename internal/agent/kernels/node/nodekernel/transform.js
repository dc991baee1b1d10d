'use strict'
// Cell transformation of Cubby's Node.js kernel. A cell that Node can run as a
// plain script is left alone (its top-level const/let/class/function
// declarations then live on in the session, as in Node's REPL). Any other cell
// (TypeScript, ESM import/export, top-level await) goes through the TypeScript
// compiler, loaded by the first such cell:
//
//   1. TypeScript syntax is removed (ts.transpileModule; imports are kept as
//      written, only `import type` disappears);
//   2. static imports become loads through the session helper (session.js),
//      which requires CommonJS packages and imports ES modules, resolved from
//      the session's working directory;
//   3. `export` keywords and `export {}` are dropped (a cell is not a module);
//   4. when the cell awaits (top-level await or an import), its body runs in
//      an async function whose top-level declarations are hoisted to the
//      session as `var`s, so later cells still see them; the value of the
//      last expression statement is the cell's result.
//
// A cell that the compiler finds syntactically invalid is returned unchanged,
// so that Node reports its own SyntaxError.

const vm = require('vm')

/** Global the session helper (session.js) is installed under. */
const HELPER = '__cubby'

let ts = null // the TypeScript compiler, loaded on first use

// IMPORT_CALL finds what may be an import() call; such cells are parsed so that
// the calls go through the session's loader (vm scripts cannot import()).
const IMPORT_CALL = /\bimport\s*\(/

/** compiles reports whether code is a valid plain script. */
function compiles(code) {
  if (IMPORT_CALL.test(code)) return false // import() needs the session's loader
  try {
    new vm.Script(code, { filename: 'cell.js' })
    return true
  } catch (err) {
    return !(err instanceof SyntaxError)
  }
}

/**
 * transform returns the script the session runs for a cell (see above).
 * @param {string} code the cell as the user wrote it
 * @returns {string}
 */
function transform(code) {
  if (compiles(code)) return code
  ts = ts || require('typescript')
  const out = ts.transpileModule(code, {
    fileName: 'cell.ts',
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      moduleDetection: ts.ModuleDetectionKind.Force,
      verbatimModuleSyntax: true,
      useDefineForClassFields: true,
    },
  })
  if (out.diagnostics.some((d) => d.category === ts.DiagnosticCategory.Error)) return code
  return rewrite(out.outputText)
}

/** rewrite applies steps 2–4 to transpiled JavaScript. */
function rewrite(js) {
  const sf = ts.createSourceFile('cell.mjs', js, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS)
  // `export {a}` and the `export {}` the compiler appends run nothing.
  const stmts = sf.statements.filter((s) => !(ts.isExportDeclaration(s) && !s.moduleSpecifier))
  const wrap = stmts.some((s) => ts.isImportDeclaration(s) || ts.isExportDeclaration(s) || awaits(s))
  const cell = { hoisted: [], head: [], body: [], imports: 0, text: importCallText(sf) }
  stmts.forEach((s, i) => statement(cell, s, wrap, i === stmts.length - 1))
  if (!wrap) return cell.body.join('\n')
  const vars = cell.hoisted.length ? `var ${cell.hoisted.join(', ')};\n` : ''
  return `${vars}$$.sendResult(${HELPER}.cell(async () => {\n${cell.head.concat(cell.body).join('\n')}\n}));`
}

/** statement appends the output of one top-level statement to cell. */
function statement(cell, s, wrap, last) {
  if (ts.isImportDeclaration(s)) return importDecl(cell, s)
  if (ts.isExportDeclaration(s)) return exportFrom(cell, s)
  if (ts.isExportAssignment(s)) return expression(cell, cell.text(s.expression), wrap, last)
  const text = withoutExport(cell, s)
  if (!wrap) {
    cell.body.push(text)
    return
  }
  if (ts.isVariableStatement(s)) return variables(cell, s.declarationList)
  if (ts.isFunctionDeclaration(s) && s.name) {
    cell.hoisted.push(s.name.text)
    cell.head.push(`${s.name.text} = ${text};`)
    return
  }
  if (ts.isClassDeclaration(s) && s.name) {
    cell.hoisted.push(s.name.text)
    cell.body.push(`${s.name.text} = ${text};`)
    return
  }
  if (ts.isExpressionStatement(s)) return expression(cell, cell.text(s.expression), wrap, last)
  cell.body.push(text)
}

/** exportFrom runs `export … from 'm'` for its effect: the module is loaded. */
function exportFrom(cell, s) {
  cell.body.push(`await ${HELPER}.load(${s.moduleSpecifier.getText()});`)
}

/** expression appends an expression statement, returned when it is the last one. */
function expression(cell, text, wrap, last) {
  cell.body.push(wrap && last ? `return (${text});` : `(${text});`)
}

/** variables turns a declaration list into assignments to hoisted names. */
function variables(cell, list) {
  for (const d of list.declarations) {
    boundNames(d.name, cell.hoisted)
    const init = d.initializer ? cell.text(d.initializer) : 'undefined'
    cell.body.push(`(${cell.text(d.name)} = ${init});`)
  }
}

/** boundNames collects the identifiers a binding name or pattern declares. */
function boundNames(name, out) {
  if (ts.isIdentifier(name)) {
    out.push(name.text)
    return
  }
  for (const el of name.elements) {
    if (!ts.isOmittedExpression(el)) boundNames(el.name, out)
  }
}

/** importDecl loads the module and binds the imported names. */
function importDecl(cell, s) {
  const spec = s.moduleSpecifier.getText()
  const load = `await ${HELPER}.load(${spec})`
  const clause = s.importClause
  if (!clause) {
    cell.body.push(`${load};`)
    return
  }
  const mod = `${HELPER}$m${cell.imports++}`
  cell.body.push(`const ${mod} = ${load};`)
  if (clause.name) bind(cell, clause.name.text, `${HELPER}.def(${mod})`)
  const nb = clause.namedBindings
  if (nb && ts.isNamespaceImport(nb)) bind(cell, nb.name.text, mod)
  if (nb && ts.isNamedImports(nb)) {
    for (const el of nb.elements) {
      const from = (el.propertyName || el.name).text
      bind(cell, el.name.text, from === 'default' ? `${HELPER}.def(${mod})` : `${mod}[${JSON.stringify(from)}]`)
    }
  }
}

function bind(cell, name, value) {
  cell.hoisted.push(name)
  cell.body.push(`${name} = ${value};`)
}

/** withoutExport returns a statement's text without `export` / `export default`. */
function withoutExport(cell, s) {
  const text = cell.text(s)
  const mods = ts.canHaveModifiers(s) ? ts.getModifiers(s) || [] : []
  const drop = mods.filter((m) => m.kind === ts.SyntaxKind.ExportKeyword || m.kind === ts.SyntaxKind.DefaultKeyword)
  if (!drop.length) return text
  const end = drop[drop.length - 1].getEnd() - s.getStart()
  return text.slice(end).trimStart()
}

/**
 * importCallText returns a function giving a node's text with every import(…)
 * call inside it turned into a call of the session's loader.
 */
function importCallText(sf) {
  const calls = [] // start offsets of the `import` keyword of import() calls
  const visit = (node) => {
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      calls.push(node.expression.getStart())
    }
    ts.forEachChild(node, visit)
  }
  visit(sf)
  const loader = `${HELPER}.importNamespace`
  return (node) => {
    const start = node.getStart()
    let text = node.getText()
    for (const at of calls.filter((c) => c >= start && c < node.getEnd()).sort((a, b) => b - a)) {
      const i = at - start
      text = text.slice(0, i) + loader + text.slice(i + 'import'.length)
    }
    return text
  }
}

/** awaits reports whether a top-level statement awaits outside nested functions. */
function awaits(node) {
  if (ts.isAwaitExpression(node) || (ts.isForOfStatement(node) && node.awaitModifier)) return true
  if (ts.isFunctionLike(node) || ts.isClassLike(node)) return false
  return ts.forEachChild(node, awaits) || false
}

module.exports = { transform, compiles, HELPER }
