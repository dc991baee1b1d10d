'use strict'
// Helpers installed in the session process of Cubby's Node.js kernel (as
// globalThis.__cubby, by kernel.js): module loading for transformed cells
// (transform.js) and interrupts. After this module is loaded:
//
//   - a SIGINT stops the cell's synchronous code with Node's "Script execution
//     was interrupted by `SIGINT`" error (vm breakOnSigint) and rejects the
//     cell's pending await with the same error; the session and its state
//     live on. A SIGINT between cells does nothing.
//   - the imports of transformed cells (static ones and import() calls,
//     rewritten by transform.js) resolve from the session's working
//     directory: CommonJS packages and built-ins through require, ES modules
//     through import().

const fs = require('fs')
const path = require('path')
const vm = require('vm')
const { createRequire } = require('module')
const { pathToFileURL } = require('url')

const INTERRUPTED = 'Script execution was interrupted by `SIGINT`'

/** requireFromCwd returns a require function resolving from the working directory. */
function requireFromCwd() {
  return createRequire(path.join(process.cwd(), '[cell]'))
}

/**
 * load returns the module spec names, as a static import of a cell sees it:
 * module.exports of a CommonJS package or built-in, else the namespace of an
 * ES module.
 */
async function load(spec) {
  try {
    return requireFromCwd()(spec)
  } catch (err) {
    const file = esmFile(spec, err)
    if (!file) throw err
    return import(pathToFileURL(file).href)
  }
}

/** importNamespace is import() of a cell: a module namespace in every case. */
async function importNamespace(spec) {
  if (spec.startsWith('node:') || require('module').isBuiltin(spec)) return import(spec)
  let file
  try {
    file = requireFromCwd().resolve(spec)
  } catch (err) {
    file = esmFile(spec, err)
    if (!file) throw err
  }
  return import(pathToFileURL(file).href)
}

/** esmFile returns the ES module file a failed require of spec points at, or null. */
function esmFile(spec, err) {
  if (err.code === 'ERR_REQUIRE_ESM') {
    const m = /require\(\) of ES Module (.+?) from /.exec(err.message)
    return m ? m[1] : null
  }
  if (err.code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') return exportedImport(spec)
  return null
}

/** exportedImport resolves spec through the "import" condition of its package's exports. */
function exportedImport(spec) {
  const parts = spec.split('/')
  const n = spec.startsWith('@') ? 2 : 1
  const name = parts.slice(0, n).join('/')
  const sub = parts.length > n ? './' + parts.slice(n).join('/') : '.'
  for (let dir = process.cwd(); ; dir = path.dirname(dir)) {
    const pkgDir = path.join(dir, 'node_modules', name)
    const manifest = path.join(pkgDir, 'package.json')
    if (fs.existsSync(manifest)) {
      const exp = JSON.parse(fs.readFileSync(manifest, 'utf8')).exports
      const target = pick(typeof exp === 'object' && exp !== null && sub in exp ? exp[sub] : sub === '.' ? exp : null)
      return target ? path.join(pkgDir, target) : null
    }
    if (dir === path.dirname(dir)) return null
  }
}

/** pick chooses a target of an exports entry for an ES module import. */
function pick(entry) {
  if (typeof entry === 'string') return entry
  if (Array.isArray(entry)) return entry.map(pick).find(Boolean) || null
  if (entry === null || typeof entry !== 'object') return null
  for (const cond of ['import', 'node', 'default']) {
    if (cond in entry) {
      const t = pick(entry[cond])
      if (t) return t
    }
  }
  return null
}

/** def is the default import of a loaded module (ES interop as bundlers do it). */
function def(mod) {
  if (mod === null || (typeof mod !== 'object' && typeof mod !== 'function')) return mod
  const namespace = Object.prototype.toString.call(mod) === '[object Module]'
  return (namespace || mod.__esModule) && 'default' in mod ? mod.default : mod
}

// Cells awaiting something; a SIGINT rejects them.
const pending = new Set()

/** cell runs the async body of a transformed cell; SIGINT rejects its result. */
function cell(body) {
  let entry
  const stop = new Promise((_, reject) => {
    entry = () => reject(interrupted())
  })
  pending.add(entry)
  return Promise.race([body(), stop]).finally(() => pending.delete(entry))
}

function interrupted() {
  const err = new Error(INTERRUPTED)
  err.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED'
  return err
}

process.on('SIGINT', () => {
  for (const reject of pending) reject()
})

// Every cell runs through vm.runInThisContext (the session server's run): its
// synchronous code breaks on SIGINT.
const runInThisContext = vm.runInThisContext
vm.runInThisContext = function (code, options) {
  const opts = typeof options === 'string' ? { filename: options } : { ...options }
  opts.breakOnSigint = true
  return runInThisContext.call(vm, code, opts)
}

module.exports = { load, def, cell, importNamespace }
