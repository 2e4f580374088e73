"""The exec executor of the tests: reads the worker spec on stdin and acts on the prompt's verb.

* ``sleep N``: sleep N seconds, then print ``slept``.
* ``fail TEXT``: print TEXT on stderr and exit 3.
* ``json TEXT``: print TEXT (a JSON document).
* ``progress TEXT``: report TEXT as a progress event through agentry.Client.from_env().
* anything else: print ``ok: <agent> at depth <depth>: <prompt>``.
"""

import json
import os
import sys
import time

spec = json.load(sys.stdin)
prompt = spec["prompt"]
verb, _, rest = prompt.partition(" ")
if verb == "sleep":
    time.sleep(float(rest))
    print("slept")
elif verb == "fail":
    print(rest, file=sys.stderr)
    sys.exit(3)
elif verb == "json":
    print(rest)
elif verb == "progress":
    import agentry

    with agentry.Client.from_env() as client:
        sequence = client.report_progress(rest, kind="status", data={"from": "exec"})
    print(f"reported at {sequence}")
else:
    print(f"ok: {os.environ['AGENTRY_AGENT']} at depth {os.environ['AGENTRY_DEPTH']}: {prompt}")
