"""Post-run check used by ../run.sh: every sandbox the code-interpreter Python
suite created carries metadata {"cubby-compat": "ci-py" | "ci-py-async"} and
must have been killed by its test. Prints the leftovers, kills them and exits
1 if there are any."""

import sys

from e2b import SandboxQuery
from e2b_code_interpreter import Sandbox

SUITE_KEY = "cubby-compat"


def main() -> int:
    left = []
    for value in ("ci-py", "ci-py-async"):
        paginator = Sandbox.list(query=SandboxQuery(metadata={SUITE_KEY: value}))
        while paginator.has_next:
            left.extend(paginator.next_items())
    for s in left:
        print(f"leaked sandbox {s.sandbox_id} metadata={s.metadata}", file=sys.stderr)
        Sandbox.kill(s.sandbox_id)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
