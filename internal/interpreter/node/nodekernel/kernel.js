#!/usr/bin/env node
'use strict'
// Cubby's Jupyter kernel for Node.js (`node kernel.js <connection file>`): the
// jp-kernel library (the Jupyter messaging layer of IJavascript) around a nel
// session process that runs the cells, with
//
//   - cells transformed by transform.js: TypeScript, ESM import/export and
//     top-level await work, declarations persist across cells;
//   - helpers and interrupts in the session from session.js: a SIGINT (sent
//     to the kernel's process group) interrupts the running cell only, the
//     session keeps its state;
//   - silent execute_requests (Jupyter messaging 5.3) that publish nothing and
//     do not count as executions;
//   - the kernel process exiting when its session process dies (process.exit
//     in a cell, an out-of-memory kill), so the kernel's manager sees the death.
//
// Transport: TCP (jp-kernel binds tcp://<ip>:<port>).

const fs = require('fs')
const path = require('path')
const Kernel = require('jp-kernel')
const { transform, HELPER } = require('./transform')

const PROTOCOL_VERSION = '5.3'

function main(argv) {
  const connectionFile = argv[argv.length - 1]
  if (!connectionFile || connectionFile.startsWith('-')) {
    process.stderr.write('usage: node kernel.js <connection file>\n')
    process.exit(2)
  }
  const kernel = new Kernel({
    connection: JSON.parse(fs.readFileSync(connectionFile, 'utf8')),
    cwd: process.cwd(),
    hideUndefined: true,
    protocolVersion: PROTOCOL_VERSION,
    kernelInfoReply: kernelInfo(),
    transpile: transform,
  })
  const visible = kernel.handlers.execute_request
  kernel.handlers.execute_request = function (request) {
    if (request.content.silent) return executeSilently.call(this, request)
    return visible.call(this, request)
  }
  const session = `globalThis.${HELPER} = require(${JSON.stringify(path.join(__dirname, 'session.js'))})`
  kernel.session.execute(session, {
    onError: (r) => process.stderr.write(`kernel: session set-up failed: ${r.error.evalue}\n`),
  })
  watchSession(kernel)
  const restart = kernel.restart
  kernel.restart = function (cb) {
    restart.call(this, (...args) => {
      watchSession(this)
      this.session.execute(session)
      if (cb) cb(...args)
    })
  }
  // Interrupts are the session's business (session.js); the kernel ignores them.
  process.on('SIGINT', () => {})
}

/** kernelInfo is the content of kernel_info_reply. */
function kernelInfo() {
  return {
    protocol_version: PROTOCOL_VERSION,
    implementation: 'cubby-node',
    implementation_version: '1',
    language_info: {
      name: 'javascript',
      version: process.versions.node,
      mimetype: 'application/javascript',
      file_extension: '.js',
    },
    banner: `Node.js ${process.version}`,
  }
}

/** watchSession makes the kernel exit when its session process dies on its own. */
function watchSession(kernel) {
  kernel.session._server.on('exit', (code, signal) => {
    process.stderr.write(`kernel: session process exited (code ${code}, signal ${signal})\n`)
    process.exit(code === null || code === 0 ? 1 : code)
  })
}

/**
 * executeSilently runs a silent execute_request: busy, execute_reply, idle;
 * no execute_input, results, streams or errors on iopub, no execution count.
 */
function executeSilently(request) {
  const reply = (content) =>
    request.respond(this.shellSocket, 'execute_reply', { execution_count: this.executionCount, ...content })
  this.session.execute(request.content.code, {
    beforeRun: () => request.respond(this.iopubSocket, 'status', { execution_state: 'busy' }),
    afterRun: () => request.respond(this.iopubSocket, 'status', { execution_state: 'idle' }),
    onSuccess: () => reply({ status: 'ok', payload: [], user_expressions: {} }),
    onError: (r) =>
      reply({ status: 'error', ename: r.error.ename, evalue: r.error.evalue, traceback: r.error.traceback }),
  })
}

main(process.argv.slice(2))
