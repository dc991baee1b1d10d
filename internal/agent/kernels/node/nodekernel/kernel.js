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
//     session keeps its state; the kernel repeats it to the session while the
//     cell is still in flight (it may not have reached the session yet);
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
  // Interrupts are the session's business (session.js); the kernel only makes
  // sure the cell in flight gets one (resendInterrupt).
  process.on('SIGINT', () => resendInterrupt(kernel.session))
}

// RESEND_MS and RESEND_FOR bound resendInterrupt (milliseconds); Cubby kills a
// kernel whose interrupted cell has not ended within 3 s.
const RESEND_MS = 200
const RESEND_FOR = 2500

/**
 * resendInterrupt signals the session process again while the cell that was
 * in flight when the kernel got a SIGINT is still the session's task. The
 * kernel transforms a cell before sending it, so a SIGINT can reach the
 * session before the cell does, between cells, where it does nothing; the
 * repeats interrupt the cell once it runs. They stop when the cell ends,
 * before the session is given the next one.
 */
function resendInterrupt(session) {
  const task = session._currentTask
  if (!task) return
  const started = Date.now()
  const timer = setInterval(() => {
    if (session._currentTask !== task || Date.now() - started > RESEND_FOR) {
      clearInterval(timer)
      return
    }
    try {
      process.kill(session._server.pid, 'SIGINT')
    } catch {
      clearInterval(timer)
    }
  }, RESEND_MS)
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
