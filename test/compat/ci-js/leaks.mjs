// Post-run check used by ../run.sh: every sandbox this suite created carries
// metadata {"cubby-compat": "ci-js"} and must have been killed by its test.
// Prints the leftovers, kills them and exits 1 if there are any.

import { Sandbox } from '@e2b/code-interpreter'
import { SUITE_KEY, SUITE_VALUE } from './helpers.mjs'

const paginator = Sandbox.list({ query: { metadata: { [SUITE_KEY]: SUITE_VALUE } } })
const left = []
while (paginator.hasNext) {
  left.push(...(await paginator.nextItems()))
}
for (const s of left) {
  console.error(`leaked sandbox ${s.sandboxId} metadata=${JSON.stringify(s.metadata)}`)
  await Sandbox.kill(s.sandboxId)
}
process.exit(left.length === 0 ? 0 : 1)
