import { Sandbox } from 'e2b'
const b = await Sandbox.create()
let fails = 0, ok = 0, stop = false
const churn = (async () => {
  while (!stop) { const a = await Sandbox.create(); await a.commands.run('true'); await a.kill() }
})()
const runs = Array.from({length: 3}, async () => {
  for (let i = 0; i < 40; i++) {
    try { await b.commands.run('echo hi'); ok++ } catch (e) { fails++; console.log('FAIL', e.message) }
  }
})
await Promise.all(runs); stop = true; await churn; await b.kill()
console.log({ok, fails})
