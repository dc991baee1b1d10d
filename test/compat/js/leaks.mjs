// Post-run check used by ../run.sh: every sandbox this suite created carries
// metadata {"cubby-compat": "js"} and must have been killed by its test.
// Prints the leftovers and exits 1 if there are any.

import { Sandbox } from 'e2b'
import { SUITE_KEY } from './helpers.mjs'

const paginator = Sandbox.list({ query: { metadata: { [SUITE_KEY]: 'js' } } })
const left = []
while (paginator.hasNext) {
  left.push(...(await paginator.nextItems()))
}
for (const s of left) {
  console.error(`leaked sandbox ${s.sandboxId} metadata=${JSON.stringify(s.metadata)}`)
  await Sandbox.kill(s.sandboxId)
}
process.exit(left.length === 0 ? 0 : 1)
