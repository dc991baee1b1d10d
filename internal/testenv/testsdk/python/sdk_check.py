"""One sandbox's life through the official Python SDK, unchanged, configured
only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (a replica of a Cubby
cluster): create, commands, files, run_code with a chart, kill. Prints one
JSON line {"ok": true, ...}; raises (exit code 1) on any mismatch."""

import base64
import json
import sys
import time

from e2b_code_interpreter import Sandbox

template = sys.argv[1] if len(sys.argv) > 1 else "code-interpreter"
began = time.monotonic()
sbx = Sandbox.create(template=template, timeout=300)
created_ms = int((time.monotonic() - began) * 1000)
try:
    out = sbx.commands.run("echo hi from $(hostname)")
    assert out.stdout.strip() == f"hi from {sbx.sandbox_id}", out.stdout
    sbx.files.write("/home/user/data.csv", "x,y\n1,1\n2,4\n3,9\n")
    assert sbx.files.read("/home/user/data.csv").startswith("x,y\n1,1")
    ex = sbx.run_code(
        "import pandas as pd, matplotlib.pyplot as plt\n"
        "df = pd.read_csv('/home/user/data.csv')\nplt.plot(df.x, df.y)\nplt.show()\nint(df.y.sum())"
    )
    assert ex.error is None, ex.error
    charts = [r for r in ex.results if r.png]
    assert charts and len(base64.b64decode(charts[0].png)) > 1000, "no PNG chart"
    assert any(r.text == "14" for r in ex.results), [r.text for r in ex.results]
finally:
    sbx.kill()
assert Sandbox.kill(sbx.sandbox_id) is False, "a killed sandbox is still known"
print(json.dumps({"ok": True, "sandboxID": sbx.sandbox_id, "createMs": created_ms}))
